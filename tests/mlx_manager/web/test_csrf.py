"""Dashboard writes need the CSRF token; the /v1 API and reads do not."""

from __future__ import annotations

import asyncio
import json
import tracemalloc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from fastapi import APIRouter, Form
from fastapi.testclient import TestClient

from mlx_manager.main import create_app
from mlx_manager.web.csrf import LOGIN_BODY_BYTES
from mlx_server.database import upgrade_database
from tests.support import csrf_headers


def _client_with_echo_route() -> TestClient:
    app = create_app()
    router = APIRouter()

    @router.post("/echo")
    def echo(value: str = Form("")) -> dict[str, str]:
        return {"value": value}

    app.include_router(router)
    return TestClient(app)


def test_first_page_sets_the_token_cookie_and_renders_it_for_htmx(client: TestClient) -> None:
    response = client.get("/")
    token = response.cookies["mlx_csrf"]
    assert len(token) >= 32
    assert f'"X-CSRF-Token": "{token}"' in response.text
    assert "SameSite=Strict" in response.headers["set-cookie"]
    # Once set, the cookie is kept: the page renders the same token and sets nothing new.
    again = client.get("/models")
    assert "set-cookie" not in again.headers
    assert token in again.text


def test_post_without_token_is_refused_with_a_reason() -> None:
    with _client_with_echo_route() as client:
        client.get("/")
        response = client.post("/echo", data={"value": "x"})
        assert response.status_code == 403
        assert "CSRF" in response.json()["detail"]
        wrong = client.post("/echo", data={"value": "x"}, headers={"X-CSRF-Token": "not-the-cookie"})
        assert wrong.status_code == 403


def test_post_with_header_or_form_field_passes_and_keeps_the_body() -> None:
    with _client_with_echo_route() as client:
        headers = csrf_headers(client)
        assert client.post("/echo", data={"value": "a"}, headers=headers).json() == {"value": "a"}
        token = headers["X-CSRF-Token"]
        by_form = client.post("/echo", data={"value": "b", "csrf_token": token})
        assert by_form.json() == {"value": "b"}


def test_multipart_form_carries_the_token_as_a_field_and_its_body_reaches_the_route() -> None:
    """A plain form with a file (the chat composer with an image) sends the token in its body."""
    with _client_with_echo_route() as client:
        token = csrf_headers(client)["X-CSRF-Token"]
        image = {"images": ("a.png", b"\x89PNG" + bytes(300_000), "image/png")}
        refused = client.post("/echo", data={"value": "m"}, files=image)
        assert refused.status_code == 403
        wrong = client.post("/echo", data={"value": "m", "csrf_token": "x" * 43}, files=image)
        assert wrong.status_code == 403
        passed = client.post("/echo", data={"value": "m", "csrf_token": token}, files=image)
        assert passed.json() == {"value": "m"}


def test_forged_cookie_shape_is_replaced_not_trusted() -> None:
    with _client_with_echo_route() as client:
        client.cookies.set("mlx_csrf", 'x"><script>')
        page = client.get("/")
        assert "<script>" not in page.text.split("<body", 1)[1].split(">", 1)[0]
        response = client.post("/echo", data={"value": "x"}, headers={"X-CSRF-Token": 'x"><script>'})
        assert response.status_code == 403


def test_api_under_v1_needs_no_token(client: TestClient) -> None:
    response = client.post("/v1/chat/completions", json={"model": "missing", "messages": []})
    assert response.status_code != 403


def test_another_port_of_this_host_is_refused_like_another_site() -> None:
    """A page on 127.0.0.1:9999 is the same site as the dashboard on :8080 (a Lax cookie goes
    along), and can read its cookies; the browser says `same-site` and names its origin."""
    with _client_with_echo_route() as client:
        headers = csrf_headers(client)
        same_site = client.post(
            "/echo", data={"value": "x"}, headers={**headers, "Sec-Fetch-Site": "same-site"}
        )
        assert same_site.status_code == 403 and "another site or origin" in same_site.json()["detail"]
        other_port = client.post(
            "/echo", data={"value": "x"}, headers={**headers, "Origin": "http://testserver:9999"}
        )
        assert other_port.status_code == 403
        own = client.post("/echo", data={"value": "x"}, headers={**headers, "Sec-Fetch-Site": "same-origin"})
        assert own.json() == {"value": "x"}


MB = 1 << 20
CHUNK = 64 * 1024
BOUNDARY = "form-boundary"


def _part(name: str, filename: str | None = None) -> bytes:
    disposition = f'form-data; name="{name}"' + (f'; filename="{filename}"' if filename else "")
    return f"--{BOUNDARY}\r\nContent-Disposition: {disposition}\r\n\r\n".encode()


def _post_streaming(
    app: Any, path: str, headers: dict[str, str], chunks: Iterator[bytes]
) -> tuple[int, int, bytes]:
    """POST a multipart body to `app` as a client streaming an upload, one chunk per receive;
    returns the status, how many body bytes the app had asked for when it answered, and the
    response body."""
    pulled, status, answer = 0, 0, bytearray()
    pending = next(chunks, b"")

    async def receive() -> dict[str, object]:
        nonlocal pulled, pending
        body, pending = pending, next(chunks, b"")
        pulled += len(body)
        return {"type": "http.request", "body": body, "more_body": bool(pending)}

    async def send(message: dict[str, Any]) -> None:
        nonlocal status
        if message["type"] == "http.response.start":
            status = int(message["status"])
        answer.extend(message.get("body", b""))

    headers = {
        "host": "127.0.0.1:8080",
        "content-type": f"multipart/form-data; boundary={BOUNDARY}",
        **headers,
    }
    scope = {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST", "scheme": "http",
        "path": path, "raw_path": path.encode(), "root_path": "", "query_string": b"",
        "headers": [(k.lower().encode(), v.encode()) for k, v in headers.items()],
        "client": ("127.0.0.1", 50000), "server": ("127.0.0.1", 8080),
    }  # fmt: skip
    asyncio.run(app(scope, receive, send))
    return status, pulled, bytes(answer)


def _flood(total: int) -> Iterator[bytes]:
    yield _part("password")
    for _ in range(total // CHUNK):
        yield b"x" * CHUNK


def test_a_100_mb_login_post_is_refused_before_its_body_is_read(home: Path) -> None:
    """The attack: 100 MB of multipart to /login, no cookie (nothing read), then with the
    cookie and the token in the body or the header (at most the login limit read)."""
    upgrade_database()
    app, token, size = create_app(), "t" * 43, str(100 * MB)
    cookie = {"cookie": f"mlx_csrf={token}"}
    assert _post_streaming(app, "/login", {"content-length": size}, _flood(100 * MB))[:2] == (403, 0)
    assert _post_streaming(app, "/login", {}, _flood(100 * MB))[:2] == (403, 0)  # chunked
    assert _post_streaming(app, "/login", {**cookie, "content-length": size}, _flood(100 * MB))[:2] == (
        413,
        0,
    )
    for sent_token in ({}, {"x-csrf-token": token}):  # in the body, or in the header (the route reads)
        status, pulled, _ = _post_streaming(app, "/login", {**cookie, **sent_token}, _flood(100 * MB))
        assert status == 413 and pulled <= LOGIN_BODY_BYTES + CHUNK, (sent_token, pulled)


def test_a_multipart_body_read_for_its_token_waits_on_disk_not_in_memory() -> None:
    """A plain form (no script: the token is a field) with a 20 MB file reaches the route
    whole, while the middleware holds at most ~1 MB of it in memory."""
    app = _client_with_echo_route().app
    token = "t" * 43

    def form() -> Iterator[bytes]:
        yield _part("csrf_token") + token.encode() + b"\r\n" + _part("value") + b"big\r\n"
        yield _part("file", "big.bin")
        for _ in range(20 * MB // CHUNK):
            yield b"x" * CHUNK
        yield f"\r\n--{BOUNDARY}--\r\n".encode()

    tracemalloc.start()
    status, pulled, answer = _post_streaming(app, "/echo", {"cookie": f"mlx_csrf={token}"}, form())
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert (status, json.loads(answer)) == (200, {"value": "big"}) and pulled > 20 * MB
    assert peak < 8 * MB, peak
