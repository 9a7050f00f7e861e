"""Settings changed at run time (from the dashboard), kept as JSON in `setting_overrides`.

An override wins over the environment's value for the settings that read it; deleting it
returns to the environment's value.
"""

from __future__ import annotations

import json
import time
from typing import Any

from sqlmodel import Session

from mlx_server.config import get_settings
from mlx_server.database import background_session
from mlx_server.records import SettingOverride, utcnow

# How long `cached_override` trusts what it read. Writes in this process clear the cache at
# once; a write by another process on the same database (a standalone mlx-server) shows
# within this time.
CACHE_SECONDS = 5.0
# (database file, key) -> (monotonic time read, value); a test's fresh home is a new file.
_cache: dict[tuple[str, str], tuple[float, Any]] = {}


def read_override(session: Session, key: str) -> Any | None:
    """The stored value of `key`, or None when it is not overridden."""
    row = session.get(SettingOverride, key)
    return None if row is None else json.loads(row.value)


def write_override(session: Session, key: str, value: Any) -> None:
    """Store `value` (anything JSON can hold) for `key`, replacing an earlier override."""
    row = session.get(SettingOverride, key) or SettingOverride(key=key, value="null")
    row.value = json.dumps(value)
    row.updated_at = utcnow()
    session.add(row)
    session.commit()
    _cache.clear()


def delete_override(session: Session, key: str) -> None:
    row = session.get(SettingOverride, key)
    if row is not None:
        session.delete(row)
        session.commit()
    _cache.clear()


def cached_override(key: str) -> Any | None:
    """`read_override` for per-request paths: the database is read at most once per
    CACHE_SECONDS per key, so a request usually costs a dict lookup."""
    cache_key = (str(get_settings().database_path), key)
    now = time.monotonic()
    hit = _cache.get(cache_key)
    if hit is not None and now - hit[0] < CACHE_SECONDS:
        return hit[1]
    with background_session() as session:
        value = read_override(session, key)
    _cache[cache_key] = (now, value)
    return value
