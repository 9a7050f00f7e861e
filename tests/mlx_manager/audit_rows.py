"""Audit rows written straight to the database, for the pages that show them."""

from __future__ import annotations

from typing import Any

from sqlmodel import Session

from mlx_server.database import get_engine
from mlx_server.records import AuditLog

CHAT = "POST /v1/chat/completions"


def add_audit_rows(count: int, **fields: Any) -> list[AuditLog]:
    """`count` rows (in one transaction), oldest first; `fields` over a 200 chat request."""
    values: dict[str, Any] = {"request_id": "r", "endpoint": CHAT, "status": 200, "latency_ms": 5.0, **fields}
    rows = [AuditLog(**values) for _ in range(count)]
    with Session(get_engine(), expire_on_commit=False) as session:
        session.add_all(rows)
        session.commit()
    return rows


def add_audit_row(**fields: Any) -> AuditLog:
    return add_audit_rows(1, **fields)[0]
