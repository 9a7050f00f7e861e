"""The one SQLite database shared by manager and server: engine, sessions, migrations."""

from __future__ import annotations

from collections.abc import Iterator
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Any

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from fastapi import Depends
from sqlalchemy import Engine, event
from sqlmodel import Session, create_engine, func, select

from mlx_server.config import get_settings
from mlx_server.records import ModelRecord

# The migrations are package data (mlx_server/migrations), named the way Alembic resolves a
# package resource (importlib.resources): the same in a checkout and in an installed wheel.
MIGRATIONS = "mlx_server:migrations"
BUSY_TIMEOUT_MS = 5000

_engines: dict[Path, Engine] = {}


def _set_pragmas(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    # WAL lets the dashboard read while a request writes its audit row.
    cursor.execute("PRAGMA journal_mode=WAL")
    # In WAL mode NORMAL syncs the log at checkpoints, not at every commit: a commit survives the
    # process being killed (all the audit log's acknowledgement needs), only an OS crash or power
    # loss can roll back the last ones. FULL cost an fsync per commit (~10 ms on a VM's disk),
    # which a request waited for twice once audit rows were committed before each answer.
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.close()


def get_engine(path: Path | None = None) -> Engine:
    """The engine for `path` (default: the configured database), created once."""
    path = (path or get_settings().database_path).resolve()
    if path not in _engines:
        path.parent.mkdir(parents=True, exist_ok=True)
        engine = create_engine(f"sqlite:///{path}", connect_args={"check_same_thread": False})
        event.listen(engine, "connect", _set_pragmas)
        _engines[path] = engine
    return _engines[path]


def reset_engine() -> None:
    for engine in _engines.values():
        engine.dispose()
    _engines.clear()


def get_session() -> Iterator[Session]:
    """FastAPI dependency: one session per request (`SessionDep`); route handlers take it and
    pass it into the services they call, which never open a session of their own."""
    with Session(get_engine()) as session:
        yield session


SessionDep = Annotated[Session, Depends(get_session)]


def background_session(*, expire_on_commit: bool = True) -> Session:
    """A short session of its own (`with background_session() as session:`) for work no request
    handler owns: background jobs (downloads, pulls, probes, chat turns, the scheduler), what
    runs while a reply streams or on the MLX thread (it must not hold a request's session past
    the response), middleware that runs before the route, startup and the command line.
    `expire_on_commit=False` keeps loaded rows readable after the session ends."""
    return Session(get_engine(), expire_on_commit=expire_on_commit)


def _scripts_config() -> Config:
    """Alembic's configuration, built here (no alembic.ini needed at run time)."""
    config = Config()
    config.set_main_option("script_location", MIGRATIONS)
    return config


def alembic_config(engine: Engine) -> Config:
    config = _scripts_config()
    config.set_main_option("sqlalchemy.url", str(engine.url))
    return config


@lru_cache(maxsize=1)
def head_revision() -> str | None:
    """The newest migration (read once: migrations do not change while the app runs)."""
    return ScriptDirectory.from_config(_scripts_config()).get_current_head()


def current_revision(engine: Engine | None = None) -> str | None:
    with (engine or get_engine()).connect() as connection:
        return MigrationContext.configure(connection).get_current_revision()


def upgrade_database(engine: Engine | None = None, revision: str = "head") -> str | None:
    """Apply migrations up to `revision`; returns the revision the database is at."""
    engine = engine or get_engine()
    with engine.begin() as connection:
        config = alembic_config(engine)
        config.attributes["connection"] = connection
        command.upgrade(config, revision)
    return current_revision(engine)


def database_status(engine: Engine | None = None) -> dict[str, Any]:
    """State for /health: reachable, migrated to head, and how many models it knows."""
    engine = engine or get_engine()
    try:
        revision = current_revision(engine)
        with Session(engine) as session:
            models = session.exec(select(func.count()).select_from(ModelRecord)).one()
    except Exception as exc:  # reported, not raised: /health must answer
        return {"status": "error", "detail": str(exc), "models": 0}
    head = head_revision()
    return {
        "status": "ok" if revision == head else "outdated",
        "revision": revision,
        "head": head,
        "path": str(engine.url.database),
        "models": int(models),
    }
