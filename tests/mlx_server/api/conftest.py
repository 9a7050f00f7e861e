"""One real server process with SmolLM2 for the protocol tests of this package."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import anthropic
import openai
import pytest
from fastapi.testclient import TestClient
from sqlmodel import Session

from mlx_server.database import get_engine, upgrade_database
from mlx_server.main import create_app as create_server_app
from mlx_server.models.pool import reset_model_pool
from mlx_server.models.store import DEFAULT_MODEL_ID
from mlx_server.records import ModelRecord, ModelSource
from mlx_server.services.operations.audit import reset_audit_service
from mlx_server.utils.metal import reset_metal_thread
from tests.support import ServerProcess


def register_models(models: dict[str, Path]) -> None:
    """Register model directories by id in the test's home database."""
    upgrade_database()
    with Session(get_engine()) as session:
        for model_id, path in models.items():
            session.add(ModelRecord(id=model_id, source=ModelSource.LOCAL, path=str(path)))
        session.commit()


@contextmanager
def standalone_server(models: dict[str, Path]) -> Iterator[TestClient]:
    """The standalone server app in this process with `models` registered; its audit writer,
    pool and MLX thread are reset after."""
    register_models(models)
    with TestClient(create_server_app()) as client:
        yield client
    reset_audit_service()
    reset_model_pool()
    reset_metal_thread()


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
    server.settle()
    yield server
    server.stop()


@pytest.fixture
def oai(inference_server: ServerProcess) -> openai.OpenAI:
    return openai.OpenAI(
        # Prefill runs ~10 tokens/s here, slower with both workers busy: a long tool prompt
        # can take over a minute.
        base_url=f"{inference_server.url}/v1",
        api_key="not-needed",
        max_retries=0,
        timeout=300,
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
