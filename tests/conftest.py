"""Shared fixtures: an isolated home per test, the real SmolLM2 model once per session."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlmodel import Session

from mlx_manager.config import reset_manager_settings
from mlx_server.config import reset_settings
from mlx_server.database import get_engine, reset_engine, upgrade_database
from mlx_server.models.gguf_import import convert_gguf
from mlx_server.models.store import default_model_gguf

CHROMIUM = Path("/usr/bin/chromium")


def _reset() -> None:
    reset_engine()
    reset_settings()
    reset_manager_settings()


@pytest.fixture(autouse=True)
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Every test gets its own MLX_MANAGER_HOME (database + models)."""
    home = tmp_path / "home"
    monkeypatch.setenv("MLX_MANAGER_HOME", str(home))
    monkeypatch.delenv("MLX_SERVER_HOME", raising=False)
    _reset()
    yield home
    _reset()


@pytest.fixture
def session(home: Path) -> Iterator[Session]:
    upgrade_database()
    with Session(get_engine()) as db:
        yield db


@pytest.fixture
def client(home: Path) -> Iterator[TestClient]:
    from mlx_manager.main import create_app

    with TestClient(create_app()) as test_client:
        yield test_client


@pytest.fixture(scope="session")
def smollm_gguf() -> Path:
    return default_model_gguf()


@pytest.fixture(scope="session")
def smollm_dir(tmp_path_factory: pytest.TempPathFactory, smollm_gguf: Path) -> Path:
    """SmolLM2 converted once per test session by our own importer."""
    out = tmp_path_factory.mktemp("models") / "SmolLM2-135M-Instruct"
    convert_gguf(smollm_gguf, out)
    return out


@pytest.fixture(scope="session")
def smollm(smollm_dir: Path) -> tuple[Any, Any]:
    from mlx_lm import load

    return load(str(smollm_dir))


@pytest.fixture
def chromium() -> Path:
    if not CHROMIUM.exists():
        if os.environ.get("CI"):
            pytest.fail("CI must install Debian's chromium (see .ci/run)")
        pytest.skip("Debian's chromium is not installed (apt-get install chromium)")
    return CHROMIUM


@pytest.fixture
def live_server(home: Path) -> Iterator[str]:
    """The manager app on a real loopback port, in a thread; yields its base URL."""
    import threading
    import time

    import uvicorn

    from mlx_manager.main import create_app
    from tests.support import free_port

    port = free_port()
    server = uvicorn.Server(uvicorn.Config(create_app(), host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            pytest.fail("the live server did not start within 30 s")
        time.sleep(0.05)
    yield f"http://127.0.0.1:{port}"
    server.should_exit = True
    thread.join(timeout=10)
