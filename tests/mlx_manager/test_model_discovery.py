"""Models on this machine that are not added: a Hugging Face cache (snapshots found through
refs/), LM Studio's folder, the folders setting and the models directory; listed by
`mlx-manager models scan` and the models page, added with one click."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlmodel import Session

from mlx_manager.services.model_discovery import save_model_folders, scan_models
from mlx_manager.services.settings_store import HUB_CACHE_DIR, set_setting
from mlx_server.database import get_engine
from mlx_server.models.store import add_model, get_model
from mlx_server.records import ModelSource
from tests.fixtures.disk_models import hub_cache_repo, linked_copy, write_tiny_checkpoint
from tests.support import MLX_MANAGER, csrf_headers

MLX_REPO = "mlx-community/SmolLM2-135M-Instruct-4bit"
CHECKPOINT_REPO = "someone/tiny-llama-checkpoint"


@pytest.fixture
def hf_cache(tmp_path: Path, smollm_dir: Path) -> Path:
    """A hub cache with one MLX model and one transformers checkpoint, as huggingface_hub lays
    them out (blobs, refs/main, snapshots/<commit>)."""
    cache = tmp_path / "hf-cache"
    hub_cache_repo(cache, MLX_REPO, smollm_dir)
    hub_cache_repo(cache, CHECKPOINT_REPO, write_tiny_checkpoint(tmp_path / "ckpt"))
    return cache


def test_models_scan_reads_the_cache_huggingface_hub_would_use(
    hf_cache: Path, home: Path, tmp_path: Path
) -> None:
    env = {**os.environ, "HF_HUB_CACHE": str(hf_cache), "HOME": str(tmp_path), "COLUMNS": "400"}
    env["MLX_MANAGER_HOME"] = str(home)
    scan = subprocess.run(
        [str(MLX_MANAGER), "models", "scan"], env=env, capture_output=True, text=True, timeout=120
    )
    assert scan.returncode == 0, scan.stderr
    lines = {line.split("│")[1].strip(): line for line in scan.stdout.splitlines() if line.count("│") > 3}
    assert "addable" in lines[MLX_REPO] and "MLX model (4-bit, llama)" in lines[MLX_REPO]
    assert "Hugging Face cache" in lines[MLX_REPO]
    checkpoint = lines[CHECKPOINT_REPO]
    assert "not an MLX model: convert" in checkpoint and "a Hugging Face checkpoint (BF16" in checkpoint


def test_lm_studio_folders_and_the_setting_are_searched_and_added_models_drop_out(
    session: Session,
    hf_cache: Path,
    tmp_path: Path,
    smollm_dir: Path,
    smollm_gguf: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "user"))
    lm_studio = tmp_path / "user" / ".lmstudio" / "models" / "lmstudio-community" / "SmolLM2-GGUF"
    lm_studio.mkdir(parents=True)
    os.link(smollm_gguf, lm_studio / "SmolLM2-135M-Instruct.Q4_1.gguf")
    linked_copy(smollm_dir, tmp_path / "external" / "team" / "smol-mlx")
    set_setting(session, HUB_CACHE_DIR, str(hf_cache))
    save_model_folders(session, f"{tmp_path / 'external'}\n")

    found = {item.name: item for item in scan_models(session)}
    assert found["lmstudio-community/SmolLM2-GGUF/SmolLM2-135M-Instruct.Q4_1.gguf"].disk.kind == "gguf"
    assert found["team/smol-mlx"].where == "folder" and found["team/smol-mlx"].status == "addable"
    assert found[MLX_REPO].suggested_id == MLX_REPO

    add_model(session, found[MLX_REPO].path, Path(tmp_path / "unused"), MLX_REPO)
    assert MLX_REPO not in {item.name for item in scan_models(session)}


def test_one_click_adds_a_found_model_where_it_is(client: TestClient, hf_cache: Path) -> None:
    client.headers.update(csrf_headers(client))
    with Session(get_engine()) as session:
        set_setting(session, HUB_CACHE_DIR, str(hf_cache))
    section = client.get("/models/discovered", headers={"HX-Request": "true"}).text
    assert section.startswith("<section") and "not an MLX model: convert" in section and "Convert…" in section
    snapshot = next(hf_cache.glob("models--mlx-community--*/snapshots/*"))
    row = client.post(
        "/models/discovered/add",
        data={"path": str(snapshot), "model_id": MLX_REPO},
        headers={"HX-Request": "true"},
    )
    assert row.status_code == 200 and 'data-testid="discovered-added"' in row.text
    with Session(get_engine()) as session:
        record = get_model(session, MLX_REPO)
    assert record is not None and record.source == ModelSource.IN_PLACE and Path(record.path) == snapshot
    again = client.post(
        "/models/discovered/add", data={"path": str(snapshot)}, headers={"HX-Request": "true"}
    )
    assert again.status_code == 409 and "already" in again.text
