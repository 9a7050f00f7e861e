"""A hub download of a repo whose files are already complete in the Hugging Face cache: the
files are registered at once, without the network (and the answer says so)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from fastapi.testclient import TestClient
from sqlmodel import Session

from mlx_manager.services.hub import load_hub_config
from mlx_manager.services.hub_cache import cached_snapshot
from mlx_manager.services.settings_store import HUB_CACHE_DIR, HUB_ENDPOINT, set_setting
from mlx_server.database import get_engine
from mlx_server.models.store import get_model
from mlx_server.records import ModelSource
from tests.conftest import SMOLLM_REPO
from tests.fixtures.disk_models import hub_cache_repo
from tests.support import csrf_headers

# Nothing listens there: a request to the hub would fail.
DEAD_HUB = "http://127.0.0.1:9"


def test_a_repo_complete_in_the_cache_is_registered_without_the_network(
    client: TestClient, smollm_dir: Path, tmp_path: Path
) -> None:
    cache = tmp_path / "hf-cache"
    snapshot = hub_cache_repo(cache, SMOLLM_REPO, smollm_dir)
    with Session(get_engine()) as session:
        set_setting(session, HUB_ENDPOINT, DEAD_HUB)
        set_setting(session, HUB_CACHE_DIR, str(cache))
    client.headers.update(csrf_headers(client))
    row = client.post("/downloads", data={"repo_id": SMOLLM_REPO})
    assert row.status_code == 202, row.text
    assert 'data-status="completed"' in row.text
    assert (
        "Already complete in the Hugging Face cache" in row.text
        and "registered without downloading" in row.text
    )
    with Session(get_engine()) as session:
        record = get_model(session, SMOLLM_REPO)
    assert record is not None and record.source == ModelSource.HUB and Path(record.path) == snapshot
    again = client.post("/downloads", data={"repo_id": SMOLLM_REPO})
    assert again.status_code == 409 and "already downloaded" in again.text


def test_a_snapshot_missing_a_shard_is_not_taken_from_the_cache(
    session: Session, smollm_dir: Path, tmp_path: Path
) -> None:
    files = tmp_path / "sharded"
    shutil.copytree(smollm_dir, files)
    (files / "model.safetensors").rename(files / "model-00001-of-00002.safetensors")
    shards = {"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}
    (files / "model.safetensors.index.json").write_text(json.dumps({"weight_map": shards}))
    cache = tmp_path / "hf-cache"
    hub_cache_repo(cache, "org/sharded", files)
    set_setting(session, HUB_CACHE_DIR, str(cache))
    config = load_hub_config(session)
    assert cached_snapshot(config, "org/sharded", "main") is None  # the second shard never arrived
    (files / "model-00002-of-00002.safetensors").write_bytes(b"")
    hub_cache_repo(tmp_path / "complete", "org/sharded", files)
    set_setting(session, HUB_CACHE_DIR, str(tmp_path / "complete"))
    assert cached_snapshot(load_hub_config(session), "org/sharded", "main") is not None
    assert cached_snapshot(load_hub_config(session), "org/sharded", "other-branch") is None
