"""The schema is owned by the migrations; the app keeps the database at head."""

from __future__ import annotations

from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from fastapi.testclient import TestClient
from sqlalchemy import text
from sqlmodel import Session, SQLModel

import mlx_manager.records  # noqa: F401  (manager tables on the shared metadata)
from mlx_manager.main import create_app
from mlx_server.config import get_settings
from mlx_server.database import (
    alembic_config,
    current_revision,
    get_engine,
    head_revision,
    reset_engine,
    upgrade_database,
)
from mlx_server.records import ModelRecord

# Each test here starts from no database: they are about making and migrating one.
pytestmark = pytest.mark.empty_home


def _revisions_oldest_first() -> list[str]:
    script = ScriptDirectory.from_config(alembic_config(get_engine()))
    return [rev.revision for rev in reversed(list(script.walk_revisions()))]


def test_migrations_produce_exactly_the_sqlmodel_metadata() -> None:
    upgrade_database()
    with get_engine().connect() as connection:
        diff = compare_metadata(MigrationContext.configure(connection), SQLModel.metadata)
    assert diff == []


def test_connections_use_wal_and_a_busy_timeout() -> None:
    with get_engine().connect() as connection:
        assert connection.execute(text("PRAGMA journal_mode")).scalar() == "wal"
        assert connection.execute(text("PRAGMA busy_timeout")).scalar() == 5000
        assert connection.execute(text("PRAGMA foreign_keys")).scalar() == 1


def test_deleted_database_is_recreated_on_start() -> None:
    with TestClient(create_app()) as client:
        assert client.get("/health").json()["database"]["status"] == "ok"
    database = get_settings().database_path
    reset_engine()
    database.unlink()
    Path(f"{database}-wal").unlink(missing_ok=True)
    with TestClient(create_app()) as client:
        body = client.get("/health").json()
    assert database.exists()
    assert body["database"]["revision"] == head_revision()


@pytest.mark.parametrize("start", ["base", *_revisions_oldest_first()[:-1]])
def test_database_from_an_older_revision_is_upgraded_on_start_keeping_rows(start: str) -> None:
    upgrade_database(revision=start)
    if start != "base":
        with get_engine().begin() as connection:  # the columns of the first revision: later ones add more
            connection.execute(
                text(
                    "INSERT INTO models (id, source, path, size_bytes, created_at) "
                    "VALUES ('kept', 'local', '/models/kept', 0, CURRENT_TIMESTAMP)"
                )
            )
    with TestClient(create_app()) as client:
        assert client.get("/health").json()["database"]["status"] == "ok"
    assert current_revision() == head_revision()
    if start != "base":
        with Session(get_engine()) as session:
            assert session.get(ModelRecord, "kept") is not None
