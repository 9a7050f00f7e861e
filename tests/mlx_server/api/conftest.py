"""One real server process with SmolLM2 for the protocol tests of this package."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import anthropic
import openai
import pytest
from fastapi.testclient import TestClient
from sqlmodel import Session

from mlx_server.database import get_engine, upgrade_database
from mlx_server.models.store import DEFAULT_MODEL_ID
from mlx_server.records import ModelRecord, ModelSource
from tests.support import ServerProcess


@pytest.fixture(scope="session")
def inference_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """`mlx-manager serve` on a fresh home: it imports SmolLM2 itself on first start."""
    home = tmp_path_factory.mktemp("inference-home")
    env = {
        "MLX_SERVER_IDLE_TTL_SECONDS": "0",
        # Claude-style names land on SmolLM2, as a user would set it up for a coding agent.
        "MLX_SERVER_MODEL_ALIASES": json.dumps({"claude-*": DEFAULT_MODEL_ID}),
    }
    server = ServerProcess(home, home / "serve.log", env=env)
    server.start()
    yield server
    server.stop()


@pytest.fixture
def oai(inference_server: ServerProcess) -> openai.OpenAI:
    return openai.OpenAI(
        base_url=f"{inference_server.url}/v1", api_key="not-needed", max_retries=0, timeout=60
    )


@pytest.fixture
def claude(inference_server: ServerProcess) -> anthropic.Anthropic:
    """The anthropic SDK pointed at the server root, as Claude Code's ANTHROPIC_BASE_URL is."""
    return anthropic.Anthropic(
        base_url=inference_server.url, api_key="not-needed", max_retries=0, timeout=120
    )


@pytest.fixture
def smol_app(home: Path, smollm_dir: Path) -> Iterator[TestClient]:
    """The app in this process, with SmolLM2 registered as "smol"."""
    from mlx_manager.main import create_app

    upgrade_database()
    with Session(get_engine()) as session:
        session.add(ModelRecord(id="smol", source=ModelSource.LOCAL, path=str(smollm_dir)))
        session.commit()
    with TestClient(create_app()) as client:
        yield client


@pytest.fixture
def smol_sdk(smol_app: TestClient) -> openai.OpenAI:
    """The openai SDK on `smol_app`."""
    return openai.OpenAI(base_url="http://testserver/v1", api_key="x", http_client=smol_app, max_retries=0)
