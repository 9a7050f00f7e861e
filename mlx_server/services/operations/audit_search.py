"""Reading the audit log: filters, keyset pages, rows after a cursor, batched export.

Pages are ordered by id, newest first: ids follow the order rows were written (when each
request arrived), so a page boundary (`before_id`) and the live tail's cursor (`after_id`)
never skip or repeat a row, however many rows arrive meanwhile; a row the tail sent in flight
is read again by id once it has ended (`ended_rows`).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import ColumnElement, or_
from sqlmodel import Session, col, func, select

from mlx_server.database import background_session
from mlx_server.records import AuditLog, AuditState
from mlx_server.utils.bounded import bounded, clip

EXPORT_BATCH = 500
# What a listing shows of one value a client chose (rows of older versions kept them whole).
SHOWN_MODEL_CHARS = 255
SHOWN_ERROR_CHARS = 4000
# The first batch of an export is small, so its first bytes leave at once.
FIRST_EXPORT_BATCH = 50


@dataclass(frozen=True, slots=True)
class AuditFilter:
    """Which rows to show; every field optional, all combined with AND.

    `status_class` is "1xx" .. "5xx"; `errors_only` keeps failed requests (status >= 400, an
    error recorded mid-stream after a 200, or interrupted by a crash). `since` is inclusive,
    `until` exclusive.
    """

    model: str | None = None
    endpoint: str | None = None
    status: int | None = None
    status_class: str | None = None
    errors_only: bool = False
    since: datetime | None = None
    until: datetime | None = None

    def conditions(self) -> list[ColumnElement[bool]]:
        conditions: list[ColumnElement[bool]] = []
        if self.model is not None:
            conditions.append(col(AuditLog.model) == self.model)
        if self.endpoint is not None:
            conditions.append(col(AuditLog.endpoint) == self.endpoint)
        if self.status is not None:
            conditions.append(col(AuditLog.status) == self.status)
        if self.status_class is not None:
            low = int(self.status_class[0]) * 100
            conditions.append(col(AuditLog.status).between(low, low + 99))
        if self.errors_only:
            failed = (col(AuditLog.status) >= 400, col(AuditLog.error).is_not(None))
            conditions.append(or_(*failed, col(AuditLog.state) == AuditState.INTERRUPTED))
        if self.since is not None:
            conditions.append(col(AuditLog.created_at) >= self.since)
        if self.until is not None:
            conditions.append(col(AuditLog.created_at) < self.until)
        return conditions


def latest_id(session: Session) -> int:
    """The newest row's id (0 when the log is empty): where a live tail starts."""
    return session.exec(select(func.max(AuditLog.id))).one() or 0


def count(session: Session, filters: AuditFilter) -> int:
    return int(session.exec(select(func.count()).select_from(AuditLog).where(*filters.conditions())).one())


def page_before(
    session: Session, filters: AuditFilter, *, before_id: int | None = None, limit: int = 50
) -> list[AuditLog]:
    """Up to `limit` matching rows with ids below `before_id` (None: the newest), newest first."""
    conditions = filters.conditions()
    if before_id is not None:
        conditions.append(col(AuditLog.id) < before_id)
    statement = select(AuditLog).where(*conditions).order_by(col(AuditLog.id).desc()).limit(limit)
    return list(session.exec(statement).all())


def rows_after(session: Session, filters: AuditFilter, *, after_id: int, limit: int = 50) -> list[AuditLog]:
    """Up to `limit` matching rows with ids above `after_id`, oldest first (the live tail)."""
    statement = (
        select(AuditLog)
        .where(*filters.conditions(), col(AuditLog.id) > after_id)
        .order_by(col(AuditLog.id))
        .limit(limit)
    )
    return list(session.exec(statement).all())


def ended_rows(session: Session, ids: list[int]) -> list[AuditLog]:
    """The rows of `ids` that are no longer in flight (completed or interrupted)."""
    if not ids:
        return []
    statement = select(AuditLog).where(col(AuditLog.id).in_(ids), col(AuditLog.state) != AuditState.IN_FLIGHT)
    return list(session.exec(statement).all())


def iter_batches(filters: AuditFilter, *, batch_size: int = EXPORT_BATCH) -> Iterator[list[AuditLog]]:
    """Every matching row, newest first, in batches read with a short session each.

    Short read transactions keep an export of the whole log from holding one snapshot open
    (which would stop SQLite from checkpointing the WAL the writer appends to).
    """
    before_id: int | None = None
    limit = min(FIRST_EXPORT_BATCH, batch_size)
    while True:
        with background_session() as session:
            rows = page_before(session, filters, before_id=before_id, limit=limit)
        if rows:
            yield rows
        if len(rows) < limit:
            return
        before_id, limit = rows[-1].id, batch_size


def distinct_values(session: Session, column: Any, limit: int = 200, max_chars: int = 256) -> list[str]:
    """The distinct non-null values of an indexed text column (model, endpoint), sorted; values
    longer than `max_chars` (a made-up name an older version stored whole) are left out."""
    statement = (
        select(column)
        .where(column.is_not(None), func.length(column) <= max_chars)
        .distinct()
        .order_by(column)
        .limit(limit)
    )
    return [str(value) for value in session.exec(statement).all()]


def shown(row: AuditLog) -> AuditLog:
    """`row` as a listing shows it: the values a client chose (model, error, parameters) cut
    with a marker, so a row an older version stored whole cannot make a listing huge."""
    return row.model_copy(
        update={
            "model": clip(row.model, SHOWN_MODEL_CHARS) if row.model else row.model,
            "error": clip(row.error, SHOWN_ERROR_CHARS) if row.error else row.error,
            "parameters": bounded(row.parameters) if row.parameters is not None else None,
        }
    )
