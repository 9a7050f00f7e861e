"""Attacks on the local server, each refused: what a web page in the user's browser could send
(cross-site requests, DNS rebinding, CORS), path traversal in model ids, importing a non-GGUF.

The routes come from the app's route table (the mounted /v1 app's too), so a new route that
changes state or takes a model id is covered without touching this file.
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


def app_routes(routes: list[Any], prefix: str = "") -> Iterator[tuple[str, str]]:
    """(method, path template) of every route, mounted apps included."""
    for route in iter_route_contexts(routes):
        if isinstance(route.original_route, Mount):
            yield from app_routes(route.original_route.routes, prefix + (route.path or ""))
        elif route.path is not None and route.methods:
            for method in sorted(route.methods - {"HEAD"}):
                yield method, prefix + route.path


def fill(path: str, model_id: str = "smol") -> str:
    return PARAM.sub(lambda m: model_id if m.group(1) == "model_id" else "1", path)


def state_changing_routes(routes: list[Any]) -> Iterator[tuple[str, str]]:
    """(method, path) of every route that can change state, its parameters filled in."""
    return ((method, fill(path)) for method, path in app_routes(routes) if method in UNSAFE)


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


def test_localhost_and_addresses_are_accepted_with_any_port(client: TestClient) -> None:
    # An address cannot be rebound (that needs a name), so a LAN address of a 0.0.0.0 bind works.
    hosts = ("localhost", "localhost:1234", "127.0.0.1", "[::1]:8080", "LOCALHOST:80", "192.168.1.5:8080")
    for host in hosts:
        assert client.get("/v1/models", headers={"host": host}).status_code == 200, host
        assert client.get("/", headers={"host": host}).status_code == 200, host
    for host in ("evil.example:8080", "127.0.0.1.evil.example", "localhost.evil.example"):
        assert client.get("/", headers={"host": host}).status_code == 421, host


def test_cors_preflight_from_a_foreign_origin_gets_no_allow_headers(client: TestClient) -> None:
    preflight = {"origin": EVIL, "access-control-request-method": "POST"}
    response = client.options("/v1/chat/completions", headers=preflight)
    assert response.status_code == 403
    assert not [h for h in response.headers if h.startswith("access-control-")]
    page = client.options("/settings/hub", headers=preflight)
    assert not [h for h in page.headers if h.startswith("access-control-")]


TRAVERSALS = ["../../outside", "..%2F..%2Foutside", "%2e%2e/%2e%2e/outside", "smol/../../../outside", "/etc"]


def test_path_traversal_in_model_ids_is_refused_and_touches_nothing(
    seeded: TestClient, home: Path, tmp_path: Path
) -> None:
    outside = tmp_path / "outside"  # home/models/../../outside
    outside.mkdir()
    (outside / "config.json").write_text("{}")
    before = snapshot(home)
    model_routes = [(m, p) for m, p in app_routes(seeded.app.routes) if "{model_id" in p]
    assert len(model_routes) >= 12
    answered = []
    for method, path in model_routes:
        for model_id in TRAVERSALS:
            kwargs: dict[str, Any] = {"json": {}} if path.startswith("/v1") and method == "POST" else {}
            response = seeded.request(method, fill(path, model_id), **kwargs)
            answered.append((method, path, model_id, response.status_code))
    for body_route in ("/v1/chat/completions", "/v1/messages", "/v1/embeddings", "/v1/completions"):
        body = {"model": "../../outside", "messages": [{"role": "user", "content": "x"}], "max_tokens": 1}
        response = seeded.post(body_route, json={**body, "input": "x", "prompt": "x"})
        answered.append(("POST", body_route, "../../outside", response.status_code))
    refused = [a for a in answered if a[3] not in (400, 404)]
    assert not refused, "\n".join(map(str, refused))
    assert (outside / "config.json").read_text() == "{}"
    assert snapshot(home) == before


def test_importing_etc_passwd_as_gguf_is_a_clear_error_and_creates_nothing(
    seeded: TestClient, home: Path
) -> None:
    before = snapshot(home)
    response = seeded.post("/models/import", data={"path": "/etc/passwd", "model_id": "passwd"})
    assert "not a GGUF file" in response.text or "GGUF" in response.text, response.text[:500]
    assert "Imported" not in response.text
    assert snapshot(home) == before
