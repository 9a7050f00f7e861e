"""Alembic environment: one schema for manager and server tables."""

from __future__ import annotations

from alembic import context
from sqlalchemy import Connection, create_engine
from sqlmodel import SQLModel

# Imported for their side effect: registering every table on SQLModel.metadata.
import mlx_manager.records  # noqa: F401
import mlx_server.records  # noqa: F401
from mlx_server.database import get_engine

target_metadata = SQLModel.metadata


def run(connection: Connection) -> None:
    # render_as_batch: SQLite can only alter tables by copying them.
    context.configure(connection=connection, target_metadata=target_metadata, render_as_batch=True)
    with context.begin_transaction():
        context.run_migrations()


connection = context.config.attributes.get("connection")
if connection is not None:
    run(connection)
else:
    url = context.config.get_main_option("sqlalchemy.url")
    with (create_engine(url) if url else get_engine()).begin() as own_connection:
        run(own_connection)
