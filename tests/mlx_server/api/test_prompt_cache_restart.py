"""A model's long prefixes survive a restart (models/prompt_cache_store.py): the app writes
them when it stops (its lifespan unloads every model, whose caches spill to disk) and the first
request after it starts again reuses them (the real openai SDK's cached_tokens); a corrupt
file and one saved for another fingerprint are skipped with a log line, not an error. The app
runs in this process (TestClient runs its lifespan): a server process would spend most of the
test starting up twice."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import openai
import pytest
from fastapi.testclient import TestClient
from mlx_lm.models.cache import load_prompt_cache, save_prompt_cache
from sqlmodel import Session

from mlx_manager.main import create_app
from mlx_server.database import get_engine, upgrade_database
from mlx_server.models.prompt_cache_files import store_dir
from mlx_server.records import ModelRecord, ModelSource

SYSTEM = (
    "You are the assistant of a small family bakery in Lyon. It opens from seven to seven, "
    "Tuesday to Sunday; cakes need two days' notice. Be friendly and brief."
)
MODEL = "smol"


def _cached_tokens(client: TestClient, question: str) -> int:
    oai = openai.OpenAI(base_url="http://testserver/v1", api_key="x", max_retries=0, http_client=client)
    reply = oai.chat.completions.create(
        model=MODEL,
        messages=[{"role": "system", "content": SYSTEM}, {"role": "user", "content": question}],
        temperature=0,
        max_tokens=2,
    )
    assert reply.usage is not None and reply.usage.prompt_tokens_details is not None
    return reply.usage.prompt_tokens_details.cached_tokens or 0


def test_a_models_long_prefixes_survive_a_restart(
    home: Path, smollm_dir: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("MLX_SERVER_PROMPT_CACHE_PERSIST_MIN_TOKENS", "30")
    upgrade_database()
    with Session(get_engine()) as session:
        session.add(ModelRecord(id=MODEL, source=ModelSource.LOCAL, path=str(smollm_dir)))
        session.commit()
    with TestClient(create_app()) as client:
        assert _cached_tokens(client, "Do you bake on Sundays?") == 0
    # Stopped: the model's long entry was written, and its cache in memory emptied.

    saved = sorted(store_dir(MODEL).glob("*.safetensors"))
    assert len(saved) == 1
    (saved[0].parent / "00000-corrupt.safetensors").write_bytes(b"not a safetensors file")
    kv, metadata = load_prompt_cache(str(saved[0]), return_metadata=True)
    saved_tokens = json.loads(metadata["tokens"])
    stale = {**metadata, "fingerprint": "0" * 64}  # as if the model's files had changed since
    save_prompt_cache(str(saved[0].parent / "00001-stale.safetensors"), kv, stale)

    caplog.set_level(logging.INFO, logger="mlx_server.prompt_cache_store")
    with TestClient(create_app()) as client:
        # The first request after the restart: the system turn (~40 tokens) comes from disk.
        assert _cached_tokens(client, "Do you sell croissants?") >= 30
    log = caplog.text
    assert "00000-corrupt.safetensors: unreadable prompt cache" in log
    assert "00001-stale.safetensors: saved for another version or load of smol" in log
    assert f"prompt cache entry of {len(saved_tokens)} tokens read from {saved[0]}" in log
