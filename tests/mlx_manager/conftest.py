"""The app set up against the local hub (the hub fixtures live in tests/conftest.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlmodel import Session

from mlx_server.database import get_engine, upgrade_database
from mlx_server.records import ModelRecord, ModelSource
from tests.support import csrf_headers


@pytest.fixture
def hub_client(hub_cache: Path, client: TestClient) -> TestClient:
    """The app, set up after (so torn down before) the hub it downloads from."""
    return client


@pytest.fixture
def page(home: Path, smollm_dir: Path) -> Iterator[TestClient]:
    """The app with SmolLM2 registered as "smol" (100 MB on record) and the CSRF header set,
    as the page's htmx sends it."""
    from mlx_manager.main import create_app

    upgrade_database()
    with Session(get_engine()) as session:
        session.add(ModelRecord(id="smol", source=ModelSource.LOCAL, path=str(smollm_dir), size_bytes=10**8))
        session.commit()
    with TestClient(create_app()) as client:
        client.headers.update(csrf_headers(client))
        yield client
