"""The prompt cache's disk tier seen from a client (models/prompt_cache_store.py): an entry the
memory bound evicts, or an unload drops, comes back from disk for the next request sharing its
prefix (the real openai SDK's cached_tokens); the files never exceed the disk budget; a file
damaged on disk is skipped with a log line, never the request's error. The app runs in this
process (TestClient runs its lifespan).

The bound: one SmolLM2 entry takes 11.25 MiB in memory (KV buffers grow by 256 tokens, float32
on this CPU), so 12 MiB holds one; on disk an entry takes only its tokens (~45 KiB each)."""

from __future__ import annotations

import logging
from pathlib import Path

import openai
import pytest
from fastapi.testclient import TestClient
from sqlmodel import Session

from mlx_manager.main import create_app
from mlx_server.config import reset_settings
from mlx_server.database import get_engine, upgrade_database
from mlx_server.models.prompt_cache_files import store_dir
from mlx_server.models.prompt_cache_store import flush_prompt_cache_writes
from mlx_server.records import ModelRecord, ModelSource

MODEL = "smol"
SYSTEMS = {
    "bakery": (
        "You are the assistant of a small family bakery in Lyon. It opens from seven to seven, "
        "Tuesday to Sunday; cakes need two days' notice. Be friendly and brief."
    ),
    "railway": (
        "You help travellers plan train journeys across Europe: night trains, high-speed lines, "
        "reservations and rail passes. Give the usual changes and the duration, briefly."
    ),
    "garden": (
        "You advise allotment gardeners in a rainy northern climate: what to sow each month, "
        "how to keep slugs away without poison, and when to water. Answer in two sentences."
    ),
    "library": (
        "You answer questions for a public library: opening hours, renewing loans, reserving "
        "books and using the reading room's computers. Be precise and kind, and brief."
    ),
}
PREFIX = 30  # fewer tokens than any system turn above (~38-45 with the chat template's)


@pytest.fixture
def client(home: Path, smollm_dir: Path, monkeypatch: pytest.MonkeyPatch) -> TestClient:
    monkeypatch.setenv("MLX_SERVER_PROMPT_CACHE_PERSIST_MIN_TOKENS", str(PREFIX))
    monkeypatch.setenv("MLX_SERVER_PROMPT_CACHE_MB", "12")
    upgrade_database()
    with Session(get_engine()) as session:
        session.add(ModelRecord(id=MODEL, source=ModelSource.LOCAL, path=str(smollm_dir)))
        session.commit()
    return TestClient(create_app())


def _cached_tokens(client: TestClient, system: str, question: str, flush: bool = True) -> int:
    oai = openai.OpenAI(base_url="http://testserver/v1", api_key="x", max_retries=0, http_client=client)
    reply = oai.chat.completions.create(
        model=MODEL,
        messages=[{"role": "system", "content": SYSTEMS[system]}, {"role": "user", "content": question}],
        temperature=0,
        max_tokens=2,
    )
    if flush:  # entries leaving memory are written off the request path
        flush_prompt_cache_writes()
    assert reply.usage is not None and reply.usage.prompt_tokens_details is not None
    return reply.usage.prompt_tokens_details.cached_tokens or 0


def _disk(client: TestClient) -> dict[str, int]:
    figures: dict[str, int] = client.get("/v1/admin/pool").json()["prompt_cache_disk"]
    return figures


def test_an_evicted_or_unloaded_prefix_comes_back_from_disk(client: TestClient) -> None:
    with client:
        assert _cached_tokens(client, "bakery", "Do you bake on Sundays?") == 0
        # Its reply evicts the bakery's entry; the next request waits for it if still being written.
        assert _cached_tokens(client, "railway", "Is there a night train to Vienna?", flush=False) < PREFIX
        assert _cached_tokens(client, "bakery", "Do you sell croissants?") >= PREFIX
        assert client.get("/v1/admin/pool").json()["models"][0]["prompt_cache"]["disk_hits"] == 1

        client.post(f"/v1/admin/models/{MODEL}/unload").raise_for_status()
        assert _cached_tokens(client, "railway", "Do I need a reservation to Milan?") >= PREFIX


def test_the_files_stay_within_the_disk_budget_and_a_damaged_one_is_skipped(
    client: TestClient, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("MLX_SERVER_PROMPT_CACHE_DISK_MB", "6")  # two entries of 50-60 tokens, not three
    reset_settings()
    caplog.set_level(logging.INFO, logger="mlx_server.prompt_cache_store")
    with client:
        for system in SYSTEMS:  # each evicts the one before it to disk
            _cached_tokens(client, system, "Hello, can you help me?")
            on_disk = sum(path.stat().st_size for path in store_dir(MODEL).glob("*.safetensors"))
            disk = _disk(client)
            assert on_disk == disk["bytes"] <= disk["max_bytes"] == 6 * 1024**2
        # The least recently used went first: of bakery's, railway's and garden's, two stay.
        assert disk["files"] == 2
        garden = max(store_dir(MODEL).glob("*.safetensors"), key=lambda path: path.stat().st_mtime_ns)
        assert _cached_tokens(client, "bakery", "Do you bake on Sundays?") < PREFIX  # deleted

        # Damaged on disk since it was written: skipped, deleted, and the request runs cold.
        with garden.open("r+b") as file:
            file.truncate(garden.stat().st_size - 100)
        assert _cached_tokens(client, "garden", "When do I sow beans?") < PREFIX
        assert f"ignoring {garden}: unreadable prompt cache" in caplog.text
        assert not garden.exists()
