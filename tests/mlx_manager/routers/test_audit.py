"""The audit log pages: filters, keyset pages, detail, exports, retention, live tail."""

from __future__ import annotations

import csv
import io
import json
import re
import time
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient
from sqlmodel import Session, col, select

from mlx_server.database import get_engine
from mlx_server.records import AuditLog, SettingOverride, utcnow
from mlx_server.services.operations.audit import audit_service, reset_audit_service
from mlx_server.services.operations.audit_search import EXPORT_BATCH
from tests.mlx_manager.audit_rows import add_audit_row, add_audit_rows
from tests.support import ServerProcess, csrf_headers

HTMX = {"HX-Request": "true"}
NOW = utcnow().replace(microsecond=0)


@pytest.fixture(autouse=True)
def _writer_drained(home: Path) -> Iterator[None]:
    yield
    reset_audit_service()


def _ids(rows: list[AuditLog]) -> list[int]:
    return [row.id or 0 for row in rows]


def _shown_ids(html: str) -> list[int]:
    return [int(i) for i in re.findall(r'<tr class="audit-row" id="audit-(\d+)"', html)]


def _next_before_id(html: str) -> str | None:
    match = re.search(r'hx-get="/audit\?([^"]*)before_id=(\d+)"', html)
    return match.group(2) if match else None


@pytest.fixture
def mixed_rows(client: TestClient) -> dict[str, int]:
    """One row per case, ids by name; times from 5 hours ago (a) to now (f)."""
    specs = {
        "a": {"model": "alpha", "status": 200},
        "b": {"model": "beta", "status": 404, "error": "model 'beta' not found"},
        "c": {"model": "alpha", "status": 503, "endpoint": "POST /v1/completions"},
        "d": {"model": None, "status": 200, "endpoint": "GET /v1/models"},
        "e": {"model": "alpha", "status": 200, "error": "Generation failed: boom"},  # failed mid-stream
        "f": {"model": "beta", "status": 429},
    }
    ids = {}
    for hours_ago, (name, spec) in zip((5, 4, 3, 2, 1, 0), specs.items(), strict=True):
        created_at = NOW - timedelta(hours=hours_ago)
        ids[name] = add_audit_row(request_id=f"req-{name}", created_at=created_at, **spec).id or 0
    return ids


@pytest.mark.parametrize(
    ("params", "expected"),
    [
        ({}, "fedcba"),
        ({"model": "alpha"}, "eca"),
        ({"endpoint": "GET /v1/models"}, "d"),
        ({"status": "404"}, "b"),
        ({"status": "4xx"}, "fb"),
        ({"status": "5XX"}, "c"),
        ({"status": "error"}, "fecb"),
        ({"since": (NOW - timedelta(hours=2)).strftime("%Y-%m-%dT%H:%M")}, "fed"),
        ({"until": (NOW - timedelta(hours=3)).isoformat()}, "ba"),
        (
            {
                "since": (NOW - timedelta(hours=4)).isoformat(),
                "until": (NOW - timedelta(hours=1)).isoformat(),
            },
            "dcb",
        ),
        ({"model": "alpha", "status": "error", "since": (NOW - timedelta(hours=4)).isoformat()}, "ec"),
        ({"model": "gamma"}, ""),
    ],
)
def test_each_filter_narrows_the_list(
    client: TestClient, mixed_rows: dict[str, int], params: dict[str, str], expected: str
) -> None:
    page = client.get("/audit", params=params)
    assert page.status_code == 200
    assert _shown_ids(page.text) == [mixed_rows[name] for name in expected]
    assert f'data-testid="audit-total">{len(expected)}<' in page.text


def test_time_filters_read_offsets_and_show_utc_in_the_form(client: TestClient) -> None:
    add_audit_row(request_id="late", created_at=NOW)
    local = (NOW + timedelta(hours=2)).replace(tzinfo=None).isoformat() + "+02:00"  # the same instant
    page = client.get("/audit", params={"since": local})
    assert _shown_ids(page.text) != []
    assert f'name="since" step="1" value="{NOW:%Y-%m-%dT%H:%M}' in page.text


def test_page_is_newest_first_and_load_more_walks_every_row_once(client: TestClient) -> None:
    ids = _ids(add_audit_rows(120, model="m"))
    first = client.get("/audit", params={"model": "m"})
    seen = _shown_ids(first.text)
    assert seen == sorted(ids, reverse=True)[:50]
    add_audit_rows(3, model="m")  # recorded while the user reads: must not shift the next pages
    before = _next_before_id(first.text)
    while before is not None:
        more = client.get("/audit", params={"model": "m", "before_id": before}, headers=HTMX)
        assert "<html" not in more.text and "<table" not in more.text  # just rows for the table
        seen += _shown_ids(more.text)
        before = _next_before_id(more.text)
    assert seen == sorted(ids, reverse=True)
    assert "model=m&amp;before_id=" in first.text  # the next page keeps the filters


def test_load_more_works_as_a_plain_link_without_javascript(client: TestClient) -> None:
    ids = _ids(add_audit_rows(60))
    page = client.get("/audit", params={"before_id": ids[10]})
    assert "<html" in page.text and _shown_ids(page.text) == sorted(ids[:10], reverse=True)
    assert f"older than #{ids[10]}" in page.text and "Load more" not in page.text


def test_filter_form_gets_the_results_fragment_and_boosted_navigation_the_page(
    client: TestClient, mixed_rows: dict[str, int]
) -> None:
    fragment = client.get("/audit", params={"model": "beta"}, headers=HTMX)
    assert fragment.text.lstrip().startswith('<section id="audit-results"')
    assert _shown_ids(fragment.text) == [mixed_rows["f"], mixed_rows["b"]]
    assert fragment.headers["vary"] == "HX-Request"
    boosted = client.get("/audit", headers={**HTMX, "HX-Boosted": "true"})
    assert "<html" in boosted.text and 'hx-push-url="true"' in boosted.text


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"status": "abc"}, 'Status "abc" is not a code (404), a class (4xx) or "error".'),
        ({"status": "99"}, 'Status "99" is not a code'),
        ({"since": "yesterday"}, 'Since "yesterday" is not a date and time: use 2026-11-22T10:30 (UTC)'),
        ({"until": "2026-13-01"}, 'Until "2026-13-01" is not a date and time'),
        ({"since": "2026-11-02", "until": "2026-11-01"}, "Since must be earlier than Until."),
        ({"before_id": "x1"}, 'before_id "x1" is not a row id'),
    ],
)
def test_invalid_filters_show_what_to_fix(client: TestClient, params: dict[str, str], message: str) -> None:
    add_audit_row()
    for headers in ({}, HTMX):
        page = client.get("/audit", params=params, headers=headers)
        assert page.status_code == 400
        assert 'role="alert"' in page.text and message.replace('"', "&#34;") in page.text
        assert _shown_ids(page.text) == []
    assert client.get("/audit/export.csv", params=params).status_code == 400
    assert client.get("/audit/events", params=params).status_code == 400


def test_detail_page_shows_every_field(client: TestClient) -> None:
    row = add_audit_row(
        request_id="abc123",
        model="alpha",
        status=500,
        latency_ms=1234.5,
        ttft_ms=87.25,
        protocol="anthropic",
        stream=True,
        prompt_tokens=42,
        completion_tokens=7,
        error="Generation failed: <oops>",
        parameters={"temperature": 0.2, "max_tokens": 64, "stop": ["END"]},
        key_name="ci bot",
    )
    page = client.get(f"/audit/{row.id}")
    assert page.status_code == 200 and "<html" in page.text
    text = re.sub(r"<[^>]+>", " ", page.text)
    for shown in ("abc123", "alpha", "500", "anthropic", "ci bot", "yes", "1234.5 ms", "87.2 ms", "42", "7"):
        assert shown in text
    assert "Generation failed: &lt;oops&gt;" in page.text
    for name, value in (("max_tokens", "64"), ("stop", '["END"]'), ("temperature", "0.2")):
        assert f"<code>{name}</code></th><td><code>{value}</code>" in page.text

    inline = client.get(f"/audit/{row.id}", headers=HTMX)
    assert inline.text.startswith(f'<tr class="audit-detail-row" id="audit-detail-{row.id}">')
    assert "87.2 ms" in inline.text and "<html" not in inline.text


def test_unknown_entry_is_a_404_page(client: TestClient) -> None:
    page = client.get("/audit/999")
    assert page.status_code == 404
    assert "Audit entry not found" in page.text and "pruned by the retention setting" in page.text
    inline = client.get("/audit/999", headers=HTMX)
    assert inline.status_code == 404 and 'id="audit-detail-999"' in inline.text


def test_csv_export_streams_the_filtered_rows_with_a_header(client: TestClient) -> None:
    add_audit_rows(EXPORT_BATCH + 20, model="m", parameters={"seed": 1})
    add_audit_row(model="other")
    add_audit_row(model="m", error="=HYPERLINK('http://x')", key_name="ci")  # a spreadsheet must not run it
    with client.stream("GET", "/audit/export.csv", params={"model": "m"}) as response:
        assert response.status_code == 200
        assert response.headers["content-type"] == "text/csv; charset=utf-8"
        assert re.fullmatch(
            r'attachment; filename="audit-log-\d{8}-\d{6}\.csv"', response.headers["content-disposition"]
        )
        chunks = list(response.iter_text())
    assert len(chunks) == 3  # the header, the first 50 rows, the other 472: never one big string
    rows = list(csv.DictReader(io.StringIO("".join(chunks))))
    assert len(rows) == EXPORT_BATCH + 21 and {r["model"] for r in rows} == {"m"}
    assert rows[0]["error"] == "'=HYPERLINK('http://x')"
    assert rows[0]["key_name"] == "ci" and rows[1]["key_name"] == ""
    assert json.loads(rows[1]["parameters"]) == {"seed": 1}
    assert [int(r["id"]) for r in rows] == sorted((int(r["id"]) for r in rows), reverse=True)


def test_jsonl_export_parses_and_honours_filters(client: TestClient, mixed_rows: dict[str, int]) -> None:
    response = client.get("/audit/export.jsonl", params={"status": "error"})
    assert response.status_code == 200
    assert response.headers["content-disposition"].endswith('.jsonl"')
    records = [json.loads(line) for line in response.text.splitlines()]
    assert [r["request_id"] for r in records] == ["req-f", "req-e", "req-c", "req-b"]
    assert records[-1]["error"] == "model 'beta' not found"
    assert datetime.fromisoformat(records[0]["created_at"]).tzinfo is not None


def _retention_override() -> Any:
    with Session(get_engine()) as session:
        row = session.get(SettingOverride, "audit_retention_days")
        return None if row is None else json.loads(row.value)


def test_retention_is_stored_and_applied_at_once(client: TestClient) -> None:
    old = add_audit_row(request_id="old", created_at=NOW - timedelta(days=10))
    recent = add_audit_row(request_id="recent", created_at=NOW - timedelta(days=2))
    response = client.post("/audit/retention", data={"days": "7"}, headers={**csrf_headers(client), **HTMX})
    assert response.status_code == 200
    assert 'data-testid="retention-days">7<' in response.text and "1 older request deleted" in response.text
    assert _retention_override() == 7
    ids = _shown_ids(client.get("/audit").text)
    assert ids == [recent.id] and old.id not in ids
    # The hourly job reads the override too, before the environment's 30 days.
    add_audit_row(request_id="eight-days", created_at=NOW - timedelta(days=8))
    assert audit_service.prune_expired() == 1


@pytest.mark.parametrize("days", ["0", "3651", "abc", "", "-3", "7.5"])
def test_retention_refuses_values_outside_1_to_3650_days(client: TestClient, days: str) -> None:
    response = client.post("/audit/retention", data={"days": days}, headers={**csrf_headers(client), **HTMX})
    assert response.status_code == 400
    assert "Keep audit rows for a whole number of days from 1 to 3650" in response.text
    assert _retention_override() is None


def test_retention_plain_form_redirects_and_reset_returns_to_the_environment(client: TestClient) -> None:
    token = csrf_headers(client)["X-CSRF-Token"]
    assert client.post("/audit/retention", data={"days": "90"}).status_code == 403  # no CSRF token
    saved = client.post("/audit/retention", data={"days": "90", "csrf_token": token}, follow_redirects=False)
    assert saved.status_code == 303 and saved.headers["location"] == "/audit#retention"
    assert 'data-testid="retention-days">90<' in client.get("/audit").text
    client.post("/audit/retention", data={"reset": "1", "csrf_token": token})
    assert _retention_override() is None
    assert 'data-testid="retention-days">30<' in client.get("/audit").text


def test_chat_requests_record_their_parameters_but_not_their_messages(client: TestClient) -> None:
    body = {
        "model": "no-such-model",
        "messages": [{"role": "user", "content": "secret prompt"}],
        "temperature": 0.3,
        "max_tokens": 12,
        "stop": ["END"],
        "tools": [{"type": "function", "function": {"name": "get_time", "parameters": {}}}],
    }
    assert client.post("/v1/chat/completions", json=body).status_code == 404
    assert audit_service.flush()
    with Session(get_engine()) as session:
        row = session.exec(select(AuditLog).order_by(col(AuditLog.id).desc())).first()
    assert row is not None and row.parameters == {
        "temperature": 0.3,
        "max_tokens": 12,
        "stop": ["END"],
        "tools": ["get_time"],
    }
    assert "secret prompt" not in json.dumps(row.model_dump(mode="json"))


def _read_events(lines: Iterator[str], deadline: float) -> Iterator[dict[str, str]]:
    """Server-sent events as {field: value} (data lines joined), until the deadline."""
    event: dict[str, str] = {}
    for line in lines:
        if time.monotonic() > deadline:
            raise AssertionError("no matching event before the deadline")
        if not line:
            if event:
                yield event
            event = {}
        elif not line.startswith(":"):
            name, _, value = line.partition(":")
            value = value.removeprefix(" ")
            event[name] = event[name] + "\n" + value if name in event else value


def _wait_until(condition: Any, timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def test_live_tail_sends_matching_rows_recorded_after_subscribing(live_server: str) -> None:
    url = f"{live_server}/audit/events"
    with httpx.stream("GET", url, params={"endpoint": "GET /v1/models"}, timeout=10) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        lines = response.iter_lines()
        assert next(lines).startswith(":")  # subscribed
        assert httpx.get(f"{live_server}/v1/models/not-a-model").status_code == 404  # other endpoint
        assert httpx.get(f"{live_server}/v1/models").status_code == 200
        event = next(_read_events(lines, time.monotonic() + 10))
    assert event["event"] == "audit-rows"
    assert _shown_ids(event["data"]) == [int(event["id"])]
    assert "<code>GET /v1/models</code>" in event["data"] and "not-a-model" not in event["data"]
    assert _wait_until(lambda: audit_service.listener_count == 0), "the tail outlived its client"


def test_live_tail_resumes_after_the_last_event_id(live_server: str) -> None:
    first, second = add_audit_row(request_id="seen"), add_audit_row(request_id="missed")
    headers = {"Last-Event-ID": str(first.id)}
    with httpx.stream(
        "GET", f"{live_server}/audit/events?after_id=0", headers=headers, timeout=10
    ) as response:
        event = next(_read_events(response.iter_lines(), time.monotonic() + 10))
    assert _shown_ids(event["data"]) == [second.id]


def test_an_open_live_tail_does_not_hold_up_shutdown(home: Path, tmp_path: Path) -> None:
    server = ServerProcess(home, tmp_path / "serve.log", env={"MLX_MANAGER_IMPORT_DEFAULT_MODEL": "0"})
    server.start()
    try:
        with httpx.stream("GET", f"{server.url}/audit/events", timeout=10) as response:
            assert next(response.iter_lines()).startswith(":")  # following the log
            server.stop()  # SIGTERM; fails unless the process exits cleanly within 20 s
    finally:
        if server.process is not None and server.process.poll() is None:
            server.process.kill()
