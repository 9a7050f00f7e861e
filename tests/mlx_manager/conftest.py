"""Hub fixtures: a local hub serving SmolLM2 (tests/hub_server.py) and the app pointed at it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from huggingface_hub import close_session
from sqlmodel import Session

from mlx_manager.services.settings_store import HUB_CACHE_DIR, HUB_ENDPOINT, set_setting
from tests.hub_server import HubFile, HubRepo, HubServer, smollm_repo

SMOLLM_REPO = "mlx-community/SmolLM2-135M-Instruct-4bit"
GATED_REPO = "mlx-community/SmolLM2-135M-Instruct-gated"


@pytest.fixture(scope="session")
def smollm_hub_repo(smollm_dir: Path) -> HubRepo:
    """Hashed once per session (the weights are 115 MB)."""
    return smollm_repo(
        smollm_dir, SMOLLM_REPO, downloads=900, likes=15, last_modified="2026-03-01T00:00:00.000Z"
    )


CONFIG_ONLY = HubFile.of("config.json", b"{}")
LLAMA_8B_SHAPES = {
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "head_dim": 128,
}


@pytest.fixture
def hub(smollm_hub_repo: HubRepo, monkeypatch: pytest.MonkeyPatch) -> Iterator[HubServer]:
    """The local hub; anything not sent to 127.0.0.1 goes to a dead proxy and fails."""
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.setenv(name, "http://127.0.0.1:9")
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")
    monkeypatch.setenv("HF_HUB_DISABLE_TELEMETRY", "1")
    close_session()  # huggingface_hub's next HTTP client reads the proxies above
    repos = [
        smollm_hub_repo,
        HubRepo(GATED_REPO, smollm_hub_repo.files, gated=True, config=smollm_hub_repo.config),
        HubRepo(
            "mlx-community/Llama-3-8B-Instruct-4bit",
            [CONFIG_ONLY],
            parameters={"U32": 1_050_000_000, "BF16": 260_000_000},
            config={"quantization": {"bits": 4, "group_size": 64}, **LLAMA_8B_SHAPES},
            downloads=5000,
            likes=3,
            last_modified="2025-05-01T00:00:00.000Z",
        ),
        HubRepo(
            "mlx-community/Giant-405B-8bit",
            [CONFIG_ONLY],
            parameters={"U32": 101_000_000_000, "BF16": 6_000_000_000},
            downloads=100,
            likes=400,
            last_modified="2026-06-01T00:00:00.000Z",
            tags=["mlx", "8-bit"],
        ),
        HubRepo("someone-else/SmolLM2-135M-Instruct", [CONFIG_ONLY], parameters={"BF16": 135_000_000}),
    ]
    with HubServer(repos) as server:
        yield server
    close_session()


@pytest.fixture
def hub_cache(hub: HubServer, session: Session, tmp_path: Path) -> Path:
    """The app's hub settings point at the local hub and a fresh cache."""
    cache = tmp_path / "hf-cache"
    set_setting(session, HUB_ENDPOINT, hub.url)
    set_setting(session, HUB_CACHE_DIR, str(cache))
    return cache


@pytest.fixture
def hub_client(hub_cache: Path, client: TestClient) -> TestClient:
    """The app, set up after (so torn down before) the hub it downloads from."""
    return client
