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

from sqlmodel import Session
from sse_starlette import ServerSentEvent
from starlette.concurrency import run_in_threadpool

from mlx_server.facade import AuditFilter, AuditLog, audit_service, get_engine, iter_batches, rows_after

CSV_COLUMNS = (
    "id", "request_id", "created_at", "endpoint", "model", "status", "latency_ms", "ttft_ms",
    "protocol", "stream", "prompt_tokens", "completion_tokens", "audio_seconds", "error", "parameters",
    "key_name", "warnings",
)  # fmt: skip
# Rows per live-tail event; a burst larger than this goes out as several events.
TAIL_BATCH = 50
# Fallback poll for rows the writer of this process did not write.
TAIL_POLL_S = 2.0
TAIL_EVENT = "audit-rows"
# Spreadsheets run cells starting with these as formulas; clients choose model names and errors.
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def _csv_cell(value: Any) -> Any:
    if isinstance(value, dict | list):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, str) and value.startswith(_FORMULA_START):
        return "'" + value
    return value


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
        yield "".join(json.dumps(row.model_dump(mode="json"), ensure_ascii=False) + "\n" for row in rows)


def _rows_after(filters: AuditFilter, after_id: int) -> list[AuditLog]:
    with Session(get_engine()) as session:
        return rows_after(session, filters, after_id=after_id, limit=TAIL_BATCH)


async def live_tail(
    filters: AuditFilter, after_id: int, render: Callable[[list[AuditLog]], str]
) -> AsyncIterator[ServerSentEvent]:
    """Events of rows matching `filters` recorded after `after_id`, as `render` draws them
    (the web layer's table rows), until cancelled.

    sse-starlette cancels this generator when the client disconnects or the server shuts
    down; leaving the `listening` block then unregisters the wake-up.
    """
    loop = asyncio.get_running_loop()
    wake = asyncio.Event()

    def notify() -> None:  # on the audit writer's thread
        loop.call_soon_threadsafe(wake.set)

    cursor = after_id
    with audit_service.listening(notify):
        yield ServerSentEvent(comment="following the audit log")  # subscribed: rows from here on
        while True:
            wake.clear()  # before the query: a batch committed during it wakes the next wait
            rows = await run_in_threadpool(_rows_after, filters, cursor)
            if rows:
                cursor = rows[-1].id or cursor
                yield ServerSentEvent(data=render(rows), event=TAIL_EVENT, id=str(cursor))
                if len(rows) == TAIL_BATCH:
                    continue
            with suppress(TimeoutError):
                await asyncio.wait_for(wake.wait(), TAIL_POLL_S)
