"""The pool tests' models: SmolLM2 registered under two ids."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlmodel import Session

from mlx_server.database import get_engine, upgrade_database
from mlx_server.models.pool import reset_model_pool
from mlx_server.records import ModelRecord, ModelSource
from mlx_server.utils.metal import reset_metal_thread


@pytest.fixture
def two_models(home: Path, smollm_dir: Path) -> Iterator[tuple[str, str]]:
    """Two registered models (the same converted files under two ids)."""
    upgrade_database()
    with Session(get_engine()) as session:
        for model_id in ("smol-a", "smol-b"):
            session.add(ModelRecord(id=model_id, source=ModelSource.LOCAL, path=str(smollm_dir)))
        session.commit()
    yield ("smol-a", "smol-b")
    reset_model_pool()
    reset_metal_thread()
