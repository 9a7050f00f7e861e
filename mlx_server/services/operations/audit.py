"""The audit log: one row per /v1 request, written when it arrives, completed when it ends.

`begin()` queues a request's row as it arrives (in flight), `update()` its figures as they
become known and when it ends; `record()` a row written whole. One writer thread inserts and
updates queued rows in batches with its own session, so a slow or locked database never
blocks a request; a row's insert and its updates that meet in one batch become one insert.
The middleware waits (bounded) for a request's row to be committed before the response starts,
so a crash or kill of the server leaves a row for every request it acknowledged; rows still in
flight at the next start are marked interrupted. Listeners (`listening()`) hear about each
committed batch: the dashboard's live tail. Rows older than the retention setting (the
dashboard's override, else the environment's) are pruned by a scheduled job (see
`mlx_server.main`).
"""

from __future__ import annotations

import logging
import queue
import re
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlmodel import Session, col, delete, func, select, update

from mlx_server.config import get_settings
from mlx_server.database import background_session
from mlx_server.records import AuditLog, AuditState, StoredResponse, utcnow
from mlx_server.services.operations.audit_search import AuditFilter
from mlx_server.services.operations.setting_overrides import delete_override, read_override, write_override

logger = logging.getLogger("mlx_server.audit")

MAX_QUERY_LIMIT = 500
# Rows written per transaction: one commit (one fsync) per batch, not per request.
BATCH_SIZE = 200
# Rows waiting at most (a soft cap); past it new rows are dropped and logged, not held in memory.
MAX_QUEUED = 10_000
STATUS_CLASSES = ("1xx", "2xx", "3xx", "4xx", "5xx")
_STATUS_CLASS = re.compile(r"[1-5]xx")
RETENTION_KEY = "audit_retention_days"
MAX_RETENTION_DAYS = 3650


@dataclass(frozen=True, slots=True)
class Retention:
    """Days audit rows are kept (0: forever), and whether the dashboard overrides the environment."""

    days: int
    overridden: bool


def audit_retention(session: Session) -> Retention:
    """The retention in force: the dashboard's override, else MLX_SERVER_AUDIT_RETENTION_DAYS."""
    override = read_override(session, RETENTION_KEY)
    if isinstance(override, int) and 0 <= override <= MAX_RETENTION_DAYS:
        return Retention(days=override, overridden=True)
    return Retention(days=get_settings().audit_retention_days, overridden=False)


def delete_older_than(table: type[AuditLog] | type[StoredResponse], retention_days: int) -> int:
    """Delete `table`'s rows created more than `retention_days` ago (0 keeps everything);
    returns how many."""
    if retention_days <= 0:
        return 0
    cutoff = utcnow() - timedelta(days=retention_days)
    with background_session() as session:
        result = session.exec(delete(table).where(col(table.created_at) < cutoff))
        session.commit()
    return int(result.rowcount)


def prune_by_retention(what: str, prune: Callable[[int], int]) -> int:
    """A retention job: `prune(days)` with the audit log's retention in force; failures are
    logged, not raised. Returns how many rows went."""
    try:
        with background_session() as session:
            days = audit_retention(session).days
        deleted = prune(days)
    except Exception:
        logger.exception("pruning %s failed", what)
        return 0
    if deleted:
        logger.info("pruned %d %s", deleted, what)
    return deleted


def set_audit_retention(session: Session, days: int | None) -> Retention:
    """Override the retention with `days` (1..MAX_RETENTION_DAYS), or None for the environment's."""
    if days is None:
        delete_override(session, RETENTION_KEY)
    elif 1 <= days <= MAX_RETENTION_DAYS:
        write_override(session, RETENTION_KEY, days)
    else:
        raise ValueError(f"retention must be between 1 and {MAX_RETENTION_DAYS} days, got {days}")
    return audit_retention(session)


# Rows in flight from before this process started were left by a server that died.
_PROCESS_STARTED = utcnow()


def mark_interrupted() -> int:
    """At start: rows still in flight that an earlier process wrote belong to a server that
    died without ending them (one server per home); they become interrupted. Returns how many."""
    with background_session() as session:
        result = session.exec(
            update(AuditLog)
            .where(col(AuditLog.state) == AuditState.IN_FLIGHT, col(AuditLog.created_at) < _PROCESS_STARTED)
            .values(state=AuditState.INTERRUPTED)
        )
        session.commit()
    if result.rowcount:
        logger.warning(
            "%d audit row(s) of requests a previous run never ended marked interrupted", result.rowcount
        )
    return int(result.rowcount)


@dataclass(frozen=True, slots=True)
class _Begin:
    """Queue item: a request's row, inserted in flight; `written` is called once it is
    committed (or its write failed), on the writer thread."""

    row: AuditLog
    written: Callable[[], None] | None


@dataclass(frozen=True, slots=True)
class _Update:
    """Queue item: fields of a row queued earlier (by `begin` or `record`); `written` as for
    _Begin."""

    row: AuditLog
    fields: dict[str, Any]
    written: Callable[[], None] | None


class _Flush:
    """Queue marker: set once every row queued before it is written."""

    def __init__(self) -> None:
        self.done = threading.Event()


class _Stop:
    """Queue marker: the writer exits after writing the rows queued before it."""


class AuditService:
    """Queues audit rows from any thread and writes them in batches on one background thread."""

    def __init__(self) -> None:
        # One FIFO for rows and markers, so a flush marker follows every row queued before it.
        self._queue: queue.SimpleQueue[_Item | _Flush | _Stop] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._listeners: set[Callable[[], None]] = set()
        self._listeners_lock = threading.Lock()

    @property
    def running(self) -> bool:
        thread = self._thread
        return thread is not None and thread.is_alive()

    def start(self) -> None:
        """Start the writer thread (idempotent; `record()` also starts it on first use)."""
        with self._lock:
            if not self.running:
                self._thread = threading.Thread(target=self._run, name="audit-writer", daemon=True)
                self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        """Write everything queued so far, then stop the writer thread."""
        with self._lock:
            thread = self._thread
            if thread is None or not thread.is_alive():
                return
            self._queue.put(_Stop())
            thread.join(timeout)
            if thread.is_alive():
                logger.warning("the audit writer did not stop within %.1f s", timeout)
            else:
                self._thread = None

    def record(self, entry: AuditLog) -> None:
        """Queue one whole row; never blocks on the database and never raises into the request."""
        self._put(entry, entry)

    def begin(self, row: AuditLog, written: Callable[[], None] | None = None) -> bool:
        """Queue a request's row as it arrives (in flight); `written` is called on the writer
        thread once it is committed or its write failed. False when it could not be queued."""
        row.state = AuditState.IN_FLIGHT
        return self._put(_Begin(row, written), row)

    def update(
        self, row: AuditLog, fields: dict[str, Any], written: Callable[[], None] | None = None
    ) -> bool:
        """Queue new values for a row queued before (its figures so far, or its end); `written`
        as for `begin`. False when they could not be queued."""
        return self._put(_Update(row, fields, written), row)

    def _put(self, item: _Item, row: AuditLog) -> bool:
        try:
            if not self.running:
                self.start()
            if self._queue.qsize() >= MAX_QUEUED:
                logger.warning("audit queue full (%d rows); dropped a row of %s", MAX_QUEUED, row.endpoint)
                return False
            self._queue.put(item)
        except Exception:  # the audit log must never fail a request
            logger.exception("could not queue the audit row for %s", row.endpoint)
            return False
        return True

    def flush(self, timeout: float = 5.0) -> bool:
        """Block until every row queued before this call is written; False on timeout."""
        if not self.running:
            if self._queue.empty():
                return True
            self.start()
        marker = _Flush()
        self._queue.put(marker)
        return marker.done.wait(timeout)

    def prune(self, retention_days: int) -> int:
        """Delete rows older than `retention_days` (0 keeps everything); returns how many."""
        return delete_older_than(AuditLog, retention_days)

    @contextmanager
    def listening(self, callback: Callable[[], None]) -> Iterator[None]:
        """Call `callback` after each batch of rows is committed, while the block runs.

        It runs on the writer thread, so it must be quick and thread-safe (e.g. hand a wake-up
        to an event loop with `call_soon_threadsafe`); it carries no rows: listeners read what
        they need from the database, which also shows rows written by other processes.
        """
        with self._listeners_lock:
            self._listeners.add(callback)
        try:
            yield
        finally:
            with self._listeners_lock:
                self._listeners.discard(callback)

    @property
    def listener_count(self) -> int:
        with self._listeners_lock:
            return len(self._listeners)

    def prune_expired(self) -> int:
        """The retention job: prune by the retention in force; failures are logged, not raised."""
        return prune_by_retention("audit rows", self.prune)

    def query(
        self,
        session: Session,
        *,
        model: str | None = None,
        endpoint: str | None = None,
        status: int | None = None,
        status_class: str | None = None,
        since: datetime | None = None,
        limit: int = 50,
        offset: int = 0,
    ) -> tuple[list[AuditLog], int]:
        """One page of rows, newest first, and how many rows match in total.

        `status` is an exact code, `status_class` a class like "4xx"; `since` is inclusive.
        """
        if status_class is not None and not _STATUS_CLASS.fullmatch(status_class):
            raise ValueError(f"status_class must be one of {', '.join(STATUS_CLASSES)}")
        if not 1 <= limit <= MAX_QUERY_LIMIT:
            raise ValueError(f"limit must be between 1 and {MAX_QUERY_LIMIT}")
        if offset < 0:
            raise ValueError("offset must not be negative")
        filters = AuditFilter(
            model=model, endpoint=endpoint, status=status, status_class=status_class, since=since
        )
        conditions = filters.conditions()
        total = session.exec(select(func.count()).select_from(AuditLog).where(*conditions)).one()
        rows = session.exec(
            select(AuditLog)
            .where(*conditions)
            .order_by(col(AuditLog.created_at).desc(), col(AuditLog.id).desc())
            .offset(offset)
            .limit(limit)
        ).all()
        return list(rows), int(total)

    def _run(self) -> None:
        while True:
            rows, flushes, stop = self._next_batch()
            if rows:
                self._write(rows)
            for flush in flushes:
                flush.done.set()
            if stop:
                return

    def _next_batch(self) -> tuple[list[_Item], list[_Flush], bool]:
        """Wait for one item, then take what else is queued, up to one batch of rows."""
        rows: list[_Item] = []
        flushes: list[_Flush] = []
        item = self._queue.get()
        while True:
            if isinstance(item, _Stop):
                return rows, flushes, True
            if isinstance(item, _Flush):
                flushes.append(item)
            else:
                rows.append(item)
            if len(rows) >= BATCH_SIZE:
                return rows, flushes, False
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                return rows, flushes, False

    def _write(self, items: list[_Item]) -> None:
        inserts: dict[int, AuditLog] = {}  # by identity: a row's updates in this batch merge in
        updates: list[_Update] = []
        written: list[Callable[[], None]] = []
        for item in items:
            if isinstance(item, (_Begin, _Update)) and item.written is not None:
                written.append(item.written)
            if isinstance(item, _Update):
                if id(item.row) in inserts or item.row.id is None:  # unwritten: insert it whole
                    inserts.setdefault(id(item.row), item.row).sqlmodel_update(item.fields)
                else:
                    updates.append(item)
                continue
            row = item.row if isinstance(item, _Begin) else item
            inserts[id(row)] = row
        try:
            # The engine of the current settings' database; not expiring keeps callers' rows readable.
            with background_session(expire_on_commit=False) as session:
                session.add_all(inserts.values())
                for change in updates:
                    session.exec(
                        update(AuditLog).where(col(AuditLog.id) == change.row.id).values(**change.fields)
                    )
                session.commit()
        except Exception:
            logger.exception("could not write %d audit row(s); they are lost", len(inserts) + len(updates))
        else:
            self._notify()
        finally:
            for callback in written:
                try:
                    callback()
                except Exception:  # e.g. its event loop closed meanwhile; the writer goes on
                    logger.debug("an audit row's written callback failed", exc_info=True)

    def _notify(self) -> None:
        with self._listeners_lock:
            listeners = list(self._listeners)
        for listener in listeners:
            try:
                listener()
            except Exception:  # one broken listener must not stop the writer
                logger.exception("an audit listener failed")


_Item = AuditLog | _Begin | _Update

audit_service = AuditService()


def get_audit_service() -> AuditService:
    return audit_service


def reset_audit_service() -> None:
    """For tests: write what is queued and stop the writer (the next record starts it again)."""
    audit_service.stop()
