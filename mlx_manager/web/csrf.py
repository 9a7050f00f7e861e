"""CSRF protection for the dashboard: a double-submit token.

Every dashboard response makes sure the browser holds a random token in the `mlx_csrf`
cookie (SameSite=Strict). A state-changing request (POST, PUT, PATCH, DELETE) outside the
API must send the same token back, in the `X-CSRF-Token` header (htmx does, see
base.html's `hx-headers`) or in a `csrf_token` form field (plain forms). Another site can
make the browser send the cookie, but cannot read it to copy it into the request. A multipart
form (the chat composer with images attached) carries the field like any other.

It also refuses a state-changing request a browser marks as sent by a page of another site
(`Origin` not this host, or `Sec-Fetch-Site: cross-site`), token or not.

The inference APIs under /v1 and /api (Ollama's) are exempt: their clients are scripts with no
cookies (their own guard, mlx_server/api/request_guard.py, refuses cross-site requests).
"""

from __future__ import annotations

import hmac
import json
import re
import secrets
from collections.abc import AsyncGenerator
from http.cookies import SimpleCookie
from urllib.parse import parse_qs

from starlette.datastructures import Headers
from starlette.formparsers import MultiPartException, MultiPartParser
from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from mlx_server.facade import is_cross_site

COOKIE = "mlx_csrf"
HEADER = "x-csrf-token"
FIELD = "csrf_token"
UNSAFE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
EXEMPT_PREFIXES = ("/v1", "/api", "/static")
MAX_FORM_BYTES = 1 << 20
# What `secrets.token_urlsafe(32)` makes; anything else in the cookie is replaced.
TOKEN_SHAPE = re.compile(r"[A-Za-z0-9_-]{32,64}")


def csrf_token(request: Request) -> str:
    """The token for this request's forms and htmx headers (set by the middleware)."""
    token: str = request.scope["state"]["csrf_token"]
    return token


class CSRFMiddleware:
    """Pure ASGI so streamed (SSE) responses pass through unbuffered."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"].startswith(EXEMPT_PREFIXES):
            await self.app(scope, receive, send)
            return
        cookie = _cookie_token(scope)
        token = cookie or secrets.token_urlsafe(32)
        scope.setdefault("state", {})["csrf_token"] = token

        if scope["method"] in UNSAFE_METHODS:
            headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope.get("headers", [])}
            if is_cross_site(headers):
                await _forbidden(send, "a page of another site sent it (Origin / Sec-Fetch-Site)")
                return
            sent, receive = await _submitted_token(scope, receive)
            if cookie is None or sent is None or not hmac.compare_digest(sent, cookie):
                await _forbidden(send, "the form or request lacked the token from the mlx_csrf cookie")
                return

        async def send_with_cookie(message: Message) -> None:
            if message["type"] == "http.response.start" and cookie is None:
                value = f"{COOKIE}={token}; Path=/; SameSite=Strict"
                message["headers"] = [*message.get("headers", []), (b"set-cookie", value.encode())]
            await send(message)

        await self.app(scope, receive, send_with_cookie)


def _cookie_token(scope: Scope) -> str | None:
    for name, value in scope.get("headers", []):
        if name == b"cookie":
            jar: SimpleCookie = SimpleCookie()
            jar.load(value.decode("latin-1"))
            if COOKIE in jar and TOKEN_SHAPE.fullmatch(jar[COOKIE].value):
                return jar[COOKIE].value
    return None


async def _submitted_token(scope: Scope, receive: Receive) -> tuple[str | None, Receive]:
    """The token from the header, else from a urlencoded or multipart form body (then replayed)."""
    headers = dict(scope.get("headers", []))
    if HEADER.encode() in headers:
        return headers[HEADER.encode()].decode("latin-1"), receive
    content_type = headers.get(b"content-type", b"")
    multipart = content_type.startswith(b"multipart/form-data")
    if not multipart and not content_type.startswith(b"application/x-www-form-urlencoded"):
        return None, receive

    # The request guard (outside this middleware) has already bounded a multipart body.
    body = bytearray()
    more = True
    while more:
        message = await receive()
        body += message.get("body", b"")
        more = message.get("more_body", False)
        if len(body) > MAX_FORM_BYTES and not multipart:
            return None, receive
    replayed = False

    async def replay() -> Message:
        nonlocal replayed
        if not replayed:
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    if multipart:
        return await _multipart_field(scope, bytes(body)), replay
    values = parse_qs(body.decode("utf-8", "replace")).get(FIELD)
    return (values[0] if values else None), replay


async def _multipart_field(scope: Scope, body: bytes) -> str | None:
    async def chunks() -> AsyncGenerator[bytes]:
        yield body

    try:
        form = await MultiPartParser(Headers(scope=scope), chunks()).parse()
    except MultiPartException:
        return None
    value = form.get(FIELD)
    await form.close()
    return value if isinstance(value, str) else None


async def _forbidden(send: Send, reason: str) -> None:
    body = json.dumps({"detail": f"CSRF check failed: reload the page and try again ({reason})."}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": 403,
            "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": body})
