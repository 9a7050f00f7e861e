"""Audit rows as streams: CSV and JSONL exports, and the live tail's server-sent events.

Exports read the log in keyset batches (`iter_batches`) and send one chunk per batch, so
memory stays flat whatever the log's size; Starlette runs these sync generators in its thread
pool, off the event loop.

The live tail follows the log with a cursor (the last id sent): the audit writer wakes it
after each committed batch (`audit_service.listening`), and it also polls every
`TAIL_POLL_S` for rows written by another process on the same database (a standalone
`mlx-server`). Each wake-up is one indexed query, `id > cursor` plus the page's filters, so
a slow client never makes rows pile up in memory, and a reconnecting EventSource resumes
from its Last-Event-ID without gaps or repeats.
"""

from __future__ import annotations

import asyncio
import csv
import io
import json
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import suppress
from typing import Any

from sse_starlette import ServerSentEvent
from starlette.concurrency import run_in_threadpool

from mlx_server.facade import (
    AuditFilter,
    AuditLog,
    AuditState,
    audit_service,
    background_session,
    bounded,
    clip,
    ended_rows,
    iter_batches,
    rows_after,
)

CSV_COLUMNS = (
    "id", "request_id", "created_at", "endpoint", "model", "status", "state", "latency_ms", "ttft_ms",
    "protocol", "stream", "prompt_tokens", "completion_tokens", "audio_seconds", "error", "parameters",
    "key_name", "warnings",
)  # fmt: skip
# Rows per live-tail event; a burst larger than this goes out as several events.
TAIL_BATCH = 50
# Fallback poll for rows the writer of this process did not write.
TAIL_POLL_S = 2.0
TAIL_EVENT = "audit-rows"
# In-flight rows a tail remembers to replace once they end (older ones stay as first drawn).
TAIL_OPEN_ROWS = 200
# What an export writes of one value a client chose (a model name, an error, a parameter).
EXPORT_TEXT_LIMIT = 4000
# Spreadsheets run cells starting with these as formulas; clients choose model names and errors.
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def _csv_cell(value: Any) -> Any:
    if isinstance(value, dict | list):
        value = clip(json.dumps(bounded(value), ensure_ascii=False), EXPORT_TEXT_LIMIT)
    elif isinstance(value, str):
        value = clip(value, EXPORT_TEXT_LIMIT)
    if isinstance(value, str) and value.startswith(_FORMULA_START):
        return "'" + value
    return value


def _exported(row: AuditLog) -> dict[str, Any]:
    """A row as an export writes it: every value a client chose bounded (clipped, marked)."""
    data: dict[str, Any] = row.model_dump(mode="json")
    return {
        name: clip(value, EXPORT_TEXT_LIMIT) if isinstance(value, str) else bounded(value)
        for name, value in data.items()
    }


def csv_export(filters: AuditFilter) -> Iterator[str]:
    """A header line, then the matching rows newest first, one chunk per batch read."""
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow(CSV_COLUMNS)
    yield buffer.getvalue()
    for rows in iter_batches(filters):
        buffer.seek(0)
        buffer.truncate()
        for row in rows:
            data = row.model_dump(mode="json")
            writer.writerow([_csv_cell(data[name]) for name in CSV_COLUMNS])
        yield buffer.getvalue()


def jsonl_export(filters: AuditFilter) -> Iterator[str]:
    """One JSON object per line per matching row, newest first, one chunk per batch read."""
    for rows in iter_batches(filters):
        yield "".join(json.dumps(_exported(row), ensure_ascii=False) + "\n" for row in rows)


def _rows_after(
    filters: AuditFilter, after_id: int, open_ids: list[int]
) -> tuple[list[AuditLog], list[AuditLog]]:
    """Rows recorded after the cursor, and those of `open_ids` (sent in flight) that have ended."""
    with background_session() as session:
        return rows_after(session, filters, after_id=after_id, limit=TAIL_BATCH), ended_rows(
            session, open_ids
        )


async def live_tail(
    filters: AuditFilter, after_id: int, render: Callable[[list[AuditLog], list[AuditLog]], str]
) -> AsyncIterator[ServerSentEvent]:
    """Events of rows matching `filters` recorded after `after_id`, as `render(new, ended)` draws
    them (the web layer's table rows: new ones to add, rows sent in flight that have since
    ended to replace), until cancelled.

    A row is written when its request arrives, so the tail sends it in flight and keeps its id
    (at most TAIL_OPEN_ROWS of them) until a later read finds it ended or interrupted.
    sse-starlette cancels this generator when the client disconnects or the server shuts
    down; leaving the `listening` block then unregisters the wake-up.
    """
    loop = asyncio.get_running_loop()
    wake = asyncio.Event()

    def notify() -> None:  # on the audit writer's thread
        loop.call_soon_threadsafe(wake.set)

    cursor = after_id
    open_ids: dict[int, None] = {}  # in insertion order: the oldest is forgotten first
    with audit_service.listening(notify):
        yield ServerSentEvent(comment="following the audit log")  # subscribed: rows from here on
        while True:
            wake.clear()  # before the query: a batch committed during it wakes the next wait
            rows, ended = await run_in_threadpool(_rows_after, filters, cursor, list(open_ids))
            for row in ended:
                open_ids.pop(row.id or 0, None)
            for row in rows:
                if row.state == AuditState.IN_FLIGHT and row.id is not None:
                    open_ids[row.id] = None
            while len(open_ids) > TAIL_OPEN_ROWS:
                open_ids.pop(next(iter(open_ids)))
            if rows:
                cursor = rows[-1].id or cursor
            if rows or ended:
                yield ServerSentEvent(data=render(rows, ended), event=TAIL_EVENT, id=str(cursor))
                if len(rows) == TAIL_BATCH:
                    continue
            with suppress(TimeoutError):
                await asyncio.wait_for(wake.wait(), TAIL_POLL_S)
