"""The app set up against the local hub (the hub fixtures live in tests/conftest.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from fastapi.testclient import TestClient


@pytest.fixture
def hub_client(hub_cache: Path, client: TestClient) -> TestClient:
    """The app, set up after (so torn down before) the hub it downloads from."""
    return client
