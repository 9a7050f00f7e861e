"""Attacks a web page in the user's browser could make on the local server, each refused.

The routes come from the app's route table (the mounted /v1 app's too), so a new
state-changing route is covered without touching this file.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.routing import iter_route_contexts
from fastapi.testclient import TestClient
from sqlalchemy import inspect, text
from sqlmodel import Session
from starlette.routing import Mount

from mlx_manager.services.conversations import create_conversation
from mlx_server.database import get_engine
from mlx_server.models.pool import get_model_pool
from tests.support import csrf_headers

UNSAFE = {"POST", "PUT", "PATCH", "DELETE"}
EVIL = "http://evil.example"
# A cross-site page can send these without a CORS preflight (a "simple" request).
ATTACKS: dict[str, dict[str, str]] = {
    "text/plain, no Origin": {"content-type": "text/plain"},
    "foreign Origin": {"content-type": "text/plain", "origin": EVIL},
    "form from a foreign Origin": {"content-type": "application/x-www-form-urlencoded", "origin": EVIL},
    "Sec-Fetch-Site cross-site": {"content-type": "text/plain", "sec-fetch-site": "cross-site"},
}
PARAM = re.compile(r"\{(\w+)(?::\w+)?\}")


def state_changing_routes(routes: list[Any], prefix: str = "") -> Iterator[tuple[str, str]]:
    """(method, path) of every route that can change state, mounted apps included."""
    for route in iter_route_contexts(routes):
        if isinstance(route.original_route, Mount):
            yield from state_changing_routes(route.original_route.routes, prefix + (route.path or ""))
        elif route.path is not None and route.methods:
            for method in sorted(route.methods & UNSAFE):
                path = PARAM.sub(lambda m: "smol" if m.group(1) == "model_id" else "1", route.path)
                yield method, prefix + path


def snapshot(home: Path) -> dict[str, Any]:
    """Every table but the audit log (refusals are audited), the pool, and the home's files."""
    engine = get_engine()
    tables = sorted(set(inspect(engine).get_table_names()) - {"audit_log", "alembic_version"})
    with engine.connect() as connection:
        rows = {t: connection.execute(text(f"SELECT * FROM {t}")).all() for t in tables}
    files = sorted(str(p.relative_to(home)) for p in home.rglob("*") if "mlx-manager.db" not in p.name)
    return {"rows": rows, "pool": sorted(get_model_pool().status()["models"], key=str), "files": files}


@pytest.fixture
def seeded(page: TestClient) -> TestClient:
    """The app with a model and a conversation, so a request that got through would change them."""
    with Session(get_engine()) as session:
        create_conversation(session, model_id="smol", system_prompt="kept")
    return page


def test_route_table_lists_the_dashboard_and_api_writes(seeded: TestClient) -> None:
    routes = set(state_changing_routes(seeded.app.routes))
    assert ("POST", "/v1/admin/models/smol/unload") in routes
    assert ("POST", "/v1/chat/completions") in routes
    assert ("POST", "/settings/hub") in routes
    assert ("POST", "/chat/1/delete") in routes
    assert len(routes) > 30


@pytest.mark.parametrize("attack", ATTACKS)
def test_cross_site_simple_requests_are_refused_and_change_nothing(
    seeded: TestClient, home: Path, attack: str
) -> None:
    app: FastAPI = seeded.app  # type: ignore[assignment]
    # Even with the page's CSRF token the Origin / Sec-Fetch-Site check stands on its own; the
    # plain attack (no Origin) has no token, as a foreign page has none.
    token = {} if attack == "text/plain, no Origin" else csrf_headers(seeded)
    del seeded.headers["x-csrf-token"]
    before = snapshot(home)
    for method, path in state_changing_routes(app.routes):
        body = b'{"model": "smol", "title": "pwned", "path": "/tmp"}'
        response = seeded.request(method, path, content=body, headers={**token, **ATTACKS[attack]})
        assert response.status_code in (403, 415), (method, path, response.status_code, response.text)
    assert snapshot(home) == before


def test_api_refusals_say_why_in_the_protocol_shape(seeded: TestClient) -> None:
    plain = seeded.post("/v1/admin/models/smol/unload", content=b"{}", headers={"content-type": "text/plain"})
    assert plain.status_code == 415
    assert "application/json" in plain.json()["error"]["message"]
    foreign = seeded.post("/v1/messages", json={}, headers={"origin": EVIL})
    assert foreign.status_code == 403
    assert foreign.json()["type"] == "error"  # Anthropic's shape on Anthropic's route
    assert "MLX_SERVER_CORS_ORIGINS" in foreign.json()["error"]["message"]


def test_same_origin_and_scripted_writes_still_work(seeded: TestClient) -> None:
    # A script (no Origin) with JSON, and the dashboard's own page (same Origin) with its token.
    scripted = seeded.post("/v1/admin/models/smol/unload", json={})
    assert scripted.status_code == 409, scripted.text  # the route ran: the model is not loaded
    same = seeded.post("/chat/1/rename", data={"title": "renamed"}, headers={"origin": "http://testserver"})
    assert same.status_code == 200, same.text


@pytest.mark.parametrize("path", ["/", "/audit", "/v1/admin/audit", "/v1/models", "/static/app.css"])
def test_a_foreign_host_is_refused(client: TestClient, path: str) -> None:
    response = client.get(path, headers={"host": "evil.example"})
    assert response.status_code == 421
    assert "MLX_SERVER_ALLOWED_HOSTS" in response.text
    assert client.get(path, headers={"host": "127.0.0.1:8080"}).status_code == 200


def test_loopback_names_are_accepted_with_any_port(client: TestClient) -> None:
    for host in ("localhost", "localhost:1234", "127.0.0.1", "[::1]:8080", "LOCALHOST:80"):
        assert client.get("/v1/models", headers={"host": host}).status_code == 200, host


def test_cors_preflight_from_a_foreign_origin_gets_no_allow_headers(client: TestClient) -> None:
    preflight = {"origin": EVIL, "access-control-request-method": "POST"}
    response = client.options("/v1/chat/completions", headers=preflight)
    assert response.status_code == 403
    assert not [h for h in response.headers if h.startswith("access-control-")]
    page = client.options("/settings/hub", headers=preflight)
    assert not [h for h in page.headers if h.startswith("access-control-")]
