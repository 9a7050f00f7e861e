"""Ollama's /api/pull through the dashboard's download manager: the real `ollama` client pulls
from the local hub (tests/hub_server.py) and sees Ollama's progress objects, then the model is
listed with its parameter size and quantization, and a second pull is done at once."""

from __future__ import annotations

from pathlib import Path

import ollama
import pytest
from sqlmodel import Session

from mlx_manager.services.settings_store import AUTO_PROBE, set_setting
from mlx_server.database import get_engine
from mlx_server.records import ModelRecord
from tests.conftest import SMOLLM_REPO


def test_the_ollama_client_pulls_a_hub_repo_with_progress(
    hub_cache: Path, session: Session, live_server: str
) -> None:
    set_setting(session, AUTO_PROBE, False)  # a transfer test: no model run after it
    client = ollama.Client(host=live_server, timeout=120)
    updates = list(client.pull(f"hf.co/{SMOLLM_REPO}:latest", stream=True))
    statuses = [u.status for u in updates]
    assert statuses[0] == "pulling manifest" and statuses[-3:] == [
        "verifying sha256 digest",
        "writing manifest",
        "success",
    ]
    layers = [u for u in updates if u.digest]
    assert layers and all(u.digest == layers[0].digest and u.digest.startswith("sha256:") for u in layers)
    sized = [u for u in layers if u.total]
    assert sized and sized[-1].total == sized[-1].completed > 100 * 1024 * 1024
    assert [u.completed for u in sized] == sorted(u.completed or 0 for u in sized)
    with Session(get_engine()) as db:
        record = db.get(ModelRecord, SMOLLM_REPO)
        assert record is not None and record.source == "hub" and Path(record.path).is_relative_to(hub_cache)
    listed = {m.model: m.details for m in client.list().models}
    details = listed[SMOLLM_REPO]
    assert details is not None and (details.parameter_size, details.quantization_level) == ("134.52M", "Q4")
    again = client.pull(SMOLLM_REPO)  # already here: success at once, no second download
    assert again.status == "success"
    with pytest.raises(ollama.ResponseError) as unknown:
        client.pull("mlx-community/No-Such-Model")
    assert unknown.value.status_code == 404
    with pytest.raises(ollama.ResponseError) as tagged:
        client.pull(f"hf.co/{SMOLLM_REPO}:Q4_K_M")
    assert tagged.value.status_code == 400 and "GGUF" in tagged.value.error
