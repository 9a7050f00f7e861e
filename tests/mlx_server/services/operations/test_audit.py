"""The audit path end to end: middleware -> queue -> writer thread -> SQLite, and retention."""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import statistics
import threading
import time
from collections.abc import AsyncIterator, Iterator
from datetime import timedelta
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI, Request
from fastapi.responses import StreamingResponse
from fastapi.testclient import TestClient
from sqlmodel import Session, col, select

from mlx_manager.main import create_app
from mlx_server.api.audit_middleware import AuditMiddleware, audit_details
from mlx_server.config import get_settings
from mlx_server.database import get_engine, upgrade_database
from mlx_server.main import AUDIT_RETENTION_JOB
from mlx_server.main import create_app as create_server_app
from mlx_server.records import AuditLog, utcnow
from mlx_server.services.operations.audit import audit_service, reset_audit_service
from mlx_server.services.operations.scheduler import get_scheduler, reset_scheduler
from tests.support import uvicorn_server


@pytest.fixture(autouse=True)
def _writer_drained(home: Path) -> Iterator[None]:
    """Write what a test queued into its own database, before `home` moves on."""
    yield
    reset_audit_service()
    reset_scheduler()


def _rows() -> list[AuditLog]:
    with Session(get_engine()) as session:
        return list(session.exec(select(AuditLog).order_by(col(AuditLog.id))).all())


def _entry(request_id: str, days_old: float = 0) -> AuditLog:
    return AuditLog(
        request_id=request_id,
        created_at=utcnow() - timedelta(days=days_old),
        endpoint="POST /v1/chat/completions",
        status=200,
        latency_ms=1.0,
    )


def _wait_for_rows(count: int, timeout: float = 5.0) -> list[AuditLog]:
    """The rows once `count` of them are completed (a row is written in flight first)."""
    deadline = time.monotonic() + timeout
    while True:
        assert audit_service.flush(timeout)
        rows = _rows()
        if sum(row.state == "completed" for row in rows) >= count or time.monotonic() > deadline:
            return rows
        time.sleep(0.02)


def _streaming_app(release: threading.Event) -> FastAPI:
    """A test-only app with the middleware and one streaming route under /v1."""
    app = FastAPI()
    app.add_middleware(AuditMiddleware)

    @app.get("/v1/test/stream")
    async def stream(request: Request, ticks: int = 3) -> StreamingResponse:
        details = audit_details(request)
        details.model, details.protocol, details.stream = "test-model", "openai", True

        async def body() -> AsyncIterator[bytes]:
            details.mark_first_token()
            yield b"data: first\n\n"
            await asyncio.to_thread(release.wait, 5)
            for tick in range(ticks):
                details.completion_tokens = tick + 1
                await asyncio.sleep(0.01)
                yield b"data: tick\n\n"
            details.prompt_tokens = 7  # after the last chunk: read when the response ends

        return StreamingResponse(body(), media_type="text/event-stream")

    @app.get("/v1/test/boom")
    def boom() -> None:
        raise RuntimeError("boom")

    return app


def test_v1_requests_are_recorded_with_endpoint_status_error_and_request_id(client: TestClient) -> None:
    listed = client.get("/v1/models")
    missing = client.get("/v1/models/unknown")
    client.get("/health")
    client.get("/v1/health")
    assert audit_service.flush(5)

    ok, not_found = _rows()
    assert (ok.endpoint, ok.status, ok.error) == ("GET /v1/models", 200, None)
    assert (not_found.endpoint, not_found.status) == ("GET /v1/models/unknown", 404)
    assert not_found.error == missing.json()["error"]["message"]
    assert ok.request_id == listed.headers["x-request-id"] and len(ok.request_id) == 32
    assert not_found.request_id == missing.headers["x-request-id"]
    assert ok.latency_ms > 0 and not_found.latency_ms > 0
    assert ok.created_at.utcoffset() == timedelta(0)


def test_standalone_server_records_the_same_endpoints_but_not_health_or_docs() -> None:
    with TestClient(create_server_app(embedded=False)) as client:
        client.get("/v1/models")
        client.get("/health")
        client.get("/docs")
        assert audit_service.flush(5)
        assert [(r.endpoint, r.status) for r in _rows()] == [("GET /v1/models", 200)]


def test_streamed_response_is_written_in_flight_and_completed_when_its_last_chunk_is_sent() -> None:
    upgrade_database()
    release = threading.Event()
    with uvicorn_server(_streaming_app(release)) as base, httpx.Client(base_url=base, timeout=5) as http:
        with http.stream("GET", "/v1/test/stream") as response:
            chunks = response.iter_raw()
            assert next(chunks).startswith(b"data: first")
            assert audit_service.flush(5)
            (started,) = _rows()  # written when it arrived, with what was known as it answered
            assert (started.state, started.status, started.latency_ms, started.model, started.stream) == (
                "in_flight",
                None,
                None,
                "test-model",
                True,
            )
            release.set()
            assert b"".join(chunks).count(b"tick") == 3
        (row,) = _wait_for_rows(1)

    assert (row.endpoint, row.state, row.status, row.model, row.protocol, row.stream) == (
        "GET /v1/test/stream",
        "completed",
        200,
        "test-model",
        "openai",
        True,
    )
    assert row.request_id == response.headers["x-request-id"]
    assert row.prompt_tokens == 7 and row.completion_tokens == 3
    assert row.ttft_ms is not None and 0 < row.ttft_ms < row.latency_ms


def test_client_leaving_mid_stream_is_recorded_as_499() -> None:
    upgrade_database()
    release = threading.Event()
    release.set()
    with uvicorn_server(_streaming_app(release)) as base, httpx.Client(base_url=base, timeout=5) as http:
        with http.stream("GET", "/v1/test/stream", params={"ticks": 500}) as response:
            chunks = response.iter_raw()
            next(chunks)
            next(chunks)
        # Leaving the block closes the connection with the body unread.
        (row,) = _wait_for_rows(1)

    assert row.status == 499
    assert row.error is not None and "closed the connection" in row.error
    assert row.completion_tokens is not None and 1 <= row.completion_tokens < 500
    assert row.prompt_tokens is None  # the handler never finished


def test_exception_escaping_the_app_is_recorded_as_500_and_reraised() -> None:
    upgrade_database()
    app = _streaming_app(threading.Event())
    with pytest.raises(RuntimeError, match="boom"):
        TestClient(app).get("/v1/test/boom")
    assert TestClient(app, raise_server_exceptions=False).get("/v1/test/boom").status_code == 500
    assert audit_service.flush(5)
    assert [(r.status, r.error) for r in _rows()] == [(500, "RuntimeError: boom")] * 2


def test_record_returns_at_once_while_another_connection_holds_the_write_lock() -> None:
    upgrade_database()
    audit_service.start()
    locker = sqlite3.connect(get_settings().database_path, isolation_level=None, timeout=1)
    locker.execute("BEGIN IMMEDIATE")  # the database's one write lock, held
    try:
        durations = []
        for number in range(20):
            entry = _entry(f"locked-{number}")
            started = time.perf_counter()
            audit_service.record(entry)
            durations.append(time.perf_counter() - started)
        assert not audit_service.flush(timeout=0.3), "the writer should be waiting for the lock"
    finally:
        locker.execute("ROLLBACK")
        locker.close()
    # Microseconds in practice; the bounds leave room for a loaded machine, not for a 5 s lock wait.
    assert statistics.median(durations) < 0.0002 and max(durations) < 0.005, durations
    assert audit_service.flush(timeout=5)
    assert [r.request_id for r in _rows()] == [f"locked-{n}" for n in range(20)]


def test_rows_are_written_in_order_and_stop_drains_the_queue() -> None:
    upgrade_database()
    for number in range(450):  # more than one batch
        audit_service.record(_entry(f"r{number}"))
    audit_service.stop()
    assert not audit_service.running
    assert [r.request_id for r in _rows()] == [f"r{n}" for n in range(450)]


@pytest.mark.empty_home
def test_a_failed_write_is_logged_and_the_writer_keeps_going(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.ERROR, logger="mlx_server.audit"):
        audit_service.record(_entry("lost"))  # no audit_log table yet: the write fails
        assert audit_service.flush(5)
    assert "could not write 1 audit row(s)" in caplog.text
    upgrade_database()
    audit_service.record(_entry("kept"))
    assert audit_service.flush(5)
    assert [r.request_id for r in _rows()] == ["kept"]


@pytest.mark.empty_home
def test_rows_written_before_migration_0002_survive_it_with_the_new_fields_empty() -> None:
    upgrade_database(revision="0001")
    with get_engine().begin() as connection:
        connection.exec_driver_sql(
            "INSERT INTO audit_log (request_id, created_at, endpoint, status, latency_ms)"
            " VALUES ('before', '2026-01-01 00:00:00.000000', 'GET /v1/models', 200, 1.5)"
        )
    upgrade_database()
    (row,) = _rows()
    assert (row.request_id, row.latency_ms, row.ttft_ms, row.protocol, row.stream) == (
        "before",
        1.5,
        None,
        None,
        None,
    )


def test_prune_deletes_only_rows_older_than_the_retention() -> None:
    upgrade_database()
    for request_id, days_old in [("old", 40), ("edge", 29.9), ("new", 0)]:
        audit_service.record(_entry(request_id, days_old))
    assert audit_service.flush(5)
    assert audit_service.prune(0) == 0  # 0 keeps everything
    assert audit_service.prune(30) == 1
    assert [r.request_id for r in _rows()] == ["edge", "new"]


def test_lifespan_prunes_at_start_and_schedules_the_retention_job() -> None:
    upgrade_database()
    audit_service.record(_entry("expired", days_old=31))
    audit_service.record(_entry("recent", days_old=1))
    audit_service.stop()
    with TestClient(create_app()):
        assert [r.request_id for r in _rows()] == ["recent"]
        job = get_scheduler().get_job(AUDIT_RETENTION_JOB)
        assert job is not None and job.trigger.interval == timedelta(hours=1)
        assert audit_service.running
    assert not audit_service.running


def test_retention_of_zero_days_keeps_every_row(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MLX_SERVER_AUDIT_RETENTION_DAYS", "0")
    upgrade_database()
    audit_service.record(_entry("ancient", days_old=3650))
    audit_service.stop()
    with TestClient(create_app()):
        assert audit_service.prune_expired() == 0
    assert [r.request_id for r in _rows()] == ["ancient"]
