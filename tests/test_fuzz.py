"""Schemathesis against the served OpenAPI schemas of /v1 (the standalone server) and the dashboard:
no 5xx and no response that breaks its declared schema, then the server still healthy.

Bounded to stay near a minute: a few examples per operation, no model registered (so no
generation runs: inference routes are fuzzed through validation and lookup, at tiny cost),
and no SSE routes (they stream until the client leaves). Each test prints its request count.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from fastapi import FastAPI
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, Phase, given, settings
from schemathesis.checks import not_a_server_error, response_schema_conformance

from mlx_manager.services.admin_account import failed_logins

# FUZZ_EXAMPLES=200 runs each operation longer by hand (the suite's run stays near a minute).
LONGER = int(os.environ.get("FUZZ_EXAMPLES", "0"))
EXAMPLES_PER_OPERATION = LONGER or 20
# /v1 runs with no model registered: each operation answers from validation or a lookup (no
# generation), a few paths that ten cases per operation already reach, at half the cost (the
# time goes into hypothesis drawing the cases from the large request schemas).
V1_EXAMPLES_PER_OPERATION = LONGER or 10
CHECKS = [not_a_server_error, response_schema_conformance]


def _fuzzable(operation: Any) -> bool:
    return not operation.path.endswith("events")


def fuzz(
    app: FastAPI, headers: dict[str, str], examples: int = EXAMPLES_PER_OPERATION
) -> tuple[int, list[str]]:
    """Every operation of the app's schema, `examples` cases each: the requests made and the
    operations that failed a check (with the first failure)."""
    schema = schemathesis.openapi.from_asgi("/openapi.json", app)
    made = 0
    failed: list[str] = []
    for result in schema.get_all_operations():
        operation = result.ok()
        if not _fuzzable(operation):
            continue

        @given(case=operation.as_strategy())
        @settings(
            max_examples=examples,
            deadline=None,
            database=None,
            phases=[Phase.generate],
            suppress_health_check=list(HealthCheck),
        )
        def call(case: schemathesis.Case) -> None:
            nonlocal made
            response = case.call(headers=headers)
            made += 1
            case.validate_response(response, checks=CHECKS)

        try:
            call()
        except Exception as exc:  # every operation is fuzzed; the failures are listed at the end
            failed.append(f"{operation.label}: {type(exc).__name__}: {str(exc)[:300]}")
    return made, failed


@pytest.fixture
def server_app(home: Path) -> Iterator[FastAPI]:
    from mlx_server.main import create_app

    app = create_app()
    with TestClient(app):  # the lifespan: migrations, audit writer
        yield app


@pytest.fixture
def manager_app(hub_cache: Path) -> Iterator[tuple[FastAPI, TestClient]]:
    """The dashboard, its hub calls going to the local hub (tests/hub_server.py)."""
    from mlx_manager.main import create_app

    app = create_app()
    with TestClient(app) as client:
        yield app, client
    # The fuzzer's wrong passwords would throttle this process's later logins (tests share it).
    failed_logins.clear()


def test_fuzz_v1_api(server_app: FastAPI) -> None:
    made, failed = fuzz(server_app, headers={}, examples=V1_EXAMPLES_PER_OPERATION)
    print(f"schemathesis /v1: {made} requests")
    assert not failed, "\n".join(failed)
    assert made > 50
    with TestClient(server_app) as client:
        assert client.get("/health").json()["status"] == "ok"


def test_fuzz_dashboard(manager_app: tuple[FastAPI, TestClient]) -> None:
    app, client = manager_app
    client.get("/")
    token = client.cookies["mlx_csrf"]
    made, failed = fuzz(app, headers={"X-CSRF-Token": token, "Cookie": f"mlx_csrf={token}"})
    print(f"schemathesis dashboard: {made} requests")
    assert not failed, "\n".join(failed)
    assert made > 50
    assert client.get("/health").json()["status"] == "ok"
