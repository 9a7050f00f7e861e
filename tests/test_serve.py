"""`mlx-manager serve` as a user runs it: a real process on a loopback port."""

from __future__ import annotations

from pathlib import Path

import httpx

from mlx_server.models.store import DEFAULT_EMBEDDING_MODEL_ID, DEFAULT_MODEL_ID, DEFAULT_STT_MODEL_ID
from tests.support import ServerProcess


def test_serve_imports_the_default_models_once(home: Path, tmp_path: Path) -> None:
    log = tmp_path / "serve.log"
    first = ServerProcess(home, log)
    url = first.url
    try:
        health = first.start()
        assert health["models"] == 3
        assert httpx.get(f"{url}/v1/health").json()["models"] == 3
        page = httpx.get(f"{url}/models").text
        assert all(
            model in page for model in (DEFAULT_MODEL_ID, DEFAULT_EMBEDDING_MODEL_ID, DEFAULT_STT_MODEL_ID)
        )
    finally:
        first.stop()
    assert log.read_text().count("imported default model") == 3
    model_dir = home / "models" / DEFAULT_MODEL_ID
    first_import = model_dir.stat().st_mtime_ns

    second = ServerProcess(home, log)
    try:
        assert second.start()["models"] == 3
    finally:
        second.stop()
    assert log.read_text().count("imported default model") == 3
    assert sorted(p.name for p in (home / "models").iterdir()) == sorted(
        [DEFAULT_MODEL_ID, DEFAULT_EMBEDDING_MODEL_ID, DEFAULT_STT_MODEL_ID]
    )
    assert model_dir.stat().st_mtime_ns == first_import
