"""GET /v1/admin/audit: filters, paging, newest first, and 400s that name the bad parameter."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlmodel import Session

from mlx_server.database import get_engine
from mlx_server.records import AuditLog, utcnow
from mlx_server.services.operations.audit import audit_service, reset_audit_service

CHAT = "POST /v1/chat/completions"
NOW = utcnow()


@pytest.fixture(autouse=True)
def _writer_drained(home: Path) -> Iterator[None]:
    yield
    reset_audit_service()


def _seed(*rows: tuple[str, str | None, int, float]) -> None:
    """(endpoint, model, status, minutes ago) per row; request ids r0, r1, ... in that order."""
    with Session(get_engine()) as session:
        for number, (endpoint, model, status, minutes_ago) in enumerate(rows):
            session.add(
                AuditLog(
                    request_id=f"r{number}",
                    created_at=NOW - timedelta(minutes=minutes_ago),
                    endpoint=endpoint,
                    model=model,
                    status=status,
                    latency_ms=10.0 + number,
                    ttft_ms=5.0,
                    protocol="openai",
                    stream=number % 2 == 0,
                    prompt_tokens=3,
                    completion_tokens=4,
                    error="The model was busy." if status >= 400 else None,
                )
            )
        session.commit()


def _ids(client: TestClient, **params: Any) -> list[str]:
    response = client.get("/v1/admin/audit", params=params)
    assert response.status_code == 200, response.text
    return [row["request_id"] for row in response.json()["data"]]


SEEDED = [
    (CHAT, "smol", 200, 180),  # r0
    (CHAT, "smol", 404, 120),  # r1
    (CHAT, "qwen", 500, 60),  # r2
    ("POST /v1/completions", "qwen", 200, 30),  # r3
    (CHAT, "qwen", 429, 10),  # r4
]


def test_lists_rows_newest_first_with_every_recorded_field(client: TestClient) -> None:
    _seed(*SEEDED)
    body = client.get("/v1/admin/audit", params={"endpoint": CHAT}).json()
    assert (body["object"], body["total"], body["limit"], body["offset"]) == ("list", 4, 50, 0)
    assert [row["request_id"] for row in body["data"]] == ["r4", "r2", "r1", "r0"]
    newest = body["data"][0]
    assert newest["status"] == 429 and newest["model"] == "qwen" and newest["error"] == "The model was busy."
    assert (newest["ttft_ms"], newest["protocol"], newest["stream"]) == (5.0, "openai", True)
    assert (newest["prompt_tokens"], newest["completion_tokens"]) == (3, 4)
    assert datetime.fromisoformat(newest["created_at"]) == NOW - timedelta(minutes=10)


def test_filters_combine(client: TestClient) -> None:
    _seed(*SEEDED)
    assert _ids(client, model="smol") == ["r1", "r0"]
    assert _ids(client, endpoint="POST /v1/completions") == ["r3"]
    assert _ids(client, status=404) == ["r1"]
    assert _ids(client, status_class="4xx") == ["r4", "r1"]
    assert _ids(client, status_class="5xx") == ["r2"]
    assert _ids(client, status_class="2xx", model="qwen") == ["r3"]
    since = NOW - timedelta(minutes=60)
    assert _ids(client, model="qwen", since=since.isoformat()) == ["r4", "r3", "r2"]
    # Without an offset, `since` is UTC.
    assert _ids(client, model="qwen", since=since.replace(tzinfo=None).isoformat()) == ["r4", "r3", "r2"]
    assert _ids(client, model="nobody") == []


def test_pages_are_disjoint_and_keep_the_total(client: TestClient) -> None:
    _seed(*[(CHAT, "smol", 200, minutes) for minutes in range(7, 0, -1)])
    pages = [
        client.get("/v1/admin/audit", params={"endpoint": CHAT, "limit": 3, "offset": offset}).json()
        for offset in (0, 3, 6, 9)
    ]
    assert [page["total"] for page in pages] == [7] * 4
    assert [[row["request_id"] for row in page["data"]] for page in pages] == [
        ["r6", "r5", "r4"],
        ["r3", "r2", "r1"],
        ["r0"],
        [],
    ]


@pytest.mark.parametrize(
    ("param", "value"),
    [
        ("status_class", "9xx"),
        ("status_class", "4XX"),
        ("status", "abc"),
        ("status", "99"),
        ("since", "yesterday"),
        ("limit", "0"),
        ("limit", "501"),
        ("offset", "-1"),
    ],
)
def test_a_bad_parameter_is_a_400_naming_it(client: TestClient, param: str, value: str) -> None:
    response = client.get("/v1/admin/audit", params={param: value})
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["param"] == param and error["type"] == "invalid_request_error"
    assert f"{param}={value!r}" in error["message"]


def test_admin_requests_are_audited_like_any_other(client: TestClient) -> None:
    listed = client.get("/v1/admin/audit")
    rejected = client.get("/v1/admin/audit", params={"status_class": "9xx"})
    assert audit_service.flush(5)
    listing = client.get("/v1/admin/audit", params={"endpoint": "GET /v1/admin/audit"})
    own = listing.headers["x-request-id"]  # its own row, in flight, if written before the query
    rows = [row for row in listing.json()["data"] if row["request_id"] != own]
    assert [(row["request_id"], row["status"], row["state"]) for row in rows] == [
        (rejected.headers["x-request-id"], 400, "completed"),
        (listed.headers["x-request-id"], 200, "completed"),
    ]
    assert rows[0]["error"] == rejected.json()["error"]["message"]
