"""Settings changed at run time (from the dashboard), kept as JSON in `setting_overrides`.

An override wins over the environment's value for the settings that read it; deleting it
returns to the environment's value.
"""

from __future__ import annotations

import json
from typing import Any

from sqlmodel import Session

from mlx_server.records import SettingOverride, utcnow


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


def delete_override(session: Session, key: str) -> None:
    row = session.get(SettingOverride, key)
    if row is not None:
        session.delete(row)
        session.commit()
