"""CSRF protection for the dashboard: a double-submit token, checked before any body is read.

Every dashboard response makes sure the browser holds a random token in the `mlx_csrf`
cookie (SameSite=Strict). A state-changing request (POST, PUT, PATCH, DELETE) outside the
API must send the same token back, in the `X-CSRF-Token` header (htmx does, see
base.html's `hx-headers`) or in a `csrf_token` form field (plain forms). Another site can
make the browser send the cookie, but cannot read it to copy it into the request. A multipart
form (the chat composer with images attached) carries the field like any other.

It also refuses a state-changing request a browser marks as sent by a page of another site or
of another origin on this site (`Origin` not this host, `Sec-Fetch-Site` cross-site or
same-site: another port of 127.0.0.1 is the same site), token or not.

Everything that can be decided from the headers is decided before the body is read: the
origin, a request without the cookie (no token could match), and a body larger than its
path allows by Content-Length (the login forms take LOGIN_BODY_BYTES). A token sent in the
body is read within that limit, and a multipart body is spooled to disk, not held in memory.

The inference APIs under /v1 and /api (Ollama's) are exempt: their clients are scripts with no
cookies (their own guard, mlx_server/api/request_guard.py, refuses cross-site requests).
"""

from __future__ import annotations

import hmac
import json
import re
import secrets
import tempfile
from collections.abc import AsyncGenerator
from http.cookies import SimpleCookie
from typing import IO
from urllib.parse import parse_qs

from starlette.datastructures import Headers
from starlette.formparsers import MultiPartException, MultiPartParser
from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from mlx_server.facade import is_cross_site, limit_body

COOKIE = "mlx_csrf"
HEADER = "x-csrf-token"
FIELD = "csrf_token"
UNSAFE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
EXEMPT_PREFIXES = ("/v1", "/api", "/static")
MAX_FORM_BYTES = 1 << 20
# The login forms hold a password and a page to return to: anything larger is not one of them.
LOGIN_PATHS = frozenset({"/login", "/login/setup", "/logout"})
LOGIN_BODY_BYTES = 16 * 1024
SPOOL_MEMORY_BYTES = 1 << 20  # a multipart body beyond this waits on disk for the route
REPLAY_CHUNK_BYTES = 1 << 16
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
            headers = Headers(scope=scope)
            refusal = _refusal(scope["path"], headers, cookie)
            if refusal is not None:
                await _refuse(send, *refusal)
                return
            if scope["path"] in LOGIN_PATHS:  # the route's own reading is bounded too
                receive = limit_body(receive, LOGIN_BODY_BYTES)
            sent, receive = await _submitted_token(scope, headers, receive)
            if sent is None or cookie is None or not hmac.compare_digest(sent, cookie):
                await _refuse(send, 403, _csrf_failed("the request lacked the mlx_csrf cookie's token"))
                return

        async def send_with_cookie(message: Message) -> None:
            if message["type"] == "http.response.start" and cookie is None:
                value = f"{COOKIE}={token}; Path=/; SameSite=Strict"
                message["headers"] = [*message.get("headers", []), (b"set-cookie", value.encode())]
            await send(message)

        await self.app(scope, receive, send_with_cookie)


def is_same_origin(headers: Headers) -> bool:
    """Whether a browser says this request comes from this dashboard's own pages (or from no
    page at all: a script, a typed address). Another port of this host is the same site, so
    `Sec-Fetch-Site: same-site` is refused like cross-site."""
    if is_cross_site(dict(headers)):
        return False
    return headers.get("sec-fetch-site", "same-origin") in ("same-origin", "none")


def _refusal(path: str, headers: Headers, cookie: str | None) -> tuple[int, str] | None:
    """What the headers alone refuse (403 or 413), before a byte of the body is read."""
    if not is_same_origin(headers):
        return 403, _csrf_failed("a page of another site or origin sent it (Origin / Sec-Fetch-Site)")
    if cookie is None:
        return 403, _csrf_failed("the browser sent no mlx_csrf cookie; open a page of this dashboard first")
    length = headers.get("content-length", "")
    if path in LOGIN_PATHS and length.isdigit() and int(length) > LOGIN_BODY_BYTES:
        return 413, f"The login forms take at most {LOGIN_BODY_BYTES} bytes; this body declares {length}."
    return None


def _csrf_failed(reason: str) -> str:
    return f"CSRF check failed: reload the page and try again ({reason})."


def _cookie_token(scope: Scope) -> str | None:
    for name, value in scope.get("headers", []):
        if name == b"cookie":
            jar: SimpleCookie = SimpleCookie()
            jar.load(value.decode("latin-1"))
            if COOKIE in jar and TOKEN_SHAPE.fullmatch(jar[COOKIE].value):
                return jar[COOKIE].value
    return None


async def _submitted_token(scope: Scope, headers: Headers, receive: Receive) -> tuple[str | None, Receive]:
    """The token from the header, else from a urlencoded or multipart form body (then replayed
    to the route)."""
    if HEADER in headers:
        return headers[HEADER], receive
    content_type = headers.get("content-type", "")
    multipart = content_type.startswith("multipart/form-data")
    if not multipart and not content_type.startswith("application/x-www-form-urlencoded"):
        return None, receive
    # A multipart body is bounded by the request guard outside (the upload limit).
    spool = await _spooled_body(receive if multipart else limit_body(receive, MAX_FORM_BYTES))
    try:
        if multipart:
            sent = await _multipart_field(scope, spool)
        else:
            values = parse_qs(spool.read().decode("utf-8", "replace")).get(FIELD)
            sent = values[0] if values else None
    except BaseException:
        spool.close()
        raise
    spool.seek(0)
    return sent, _replay(spool, receive)


async def _spooled_body(receive: Receive) -> IO[bytes]:
    """The whole body, in memory up to SPOOL_MEMORY_BYTES and on disk beyond."""
    spool: IO[bytes] = tempfile.SpooledTemporaryFile(max_size=SPOOL_MEMORY_BYTES)  # noqa: SIM115  # the route reads it
    try:
        more = True
        while more:
            message = await receive()
            spool.write(message.get("body", b""))
            more = message.get("more_body", False)
    except BaseException:
        spool.close()
        raise
    spool.seek(0)
    return spool


def _replay(spool: IO[bytes], receive: Receive) -> Receive:
    """`receive` for the route: the spooled body in chunks, then the client's own messages."""

    async def replay() -> Message:
        if spool.closed:
            return await receive()
        chunk = spool.read(REPLAY_CHUNK_BYTES)
        more = len(chunk) == REPLAY_CHUNK_BYTES
        if not more:
            spool.close()
        return {"type": "http.request", "body": chunk, "more_body": more}

    return replay


async def _multipart_field(scope: Scope, spool: IO[bytes]) -> str | None:
    async def chunks() -> AsyncGenerator[bytes]:
        while chunk := spool.read(REPLAY_CHUNK_BYTES):
            yield chunk

    try:
        form = await MultiPartParser(Headers(scope=scope), chunks()).parse()
    except MultiPartException:
        return None
    value = form.get(FIELD)
    await form.close()
    return value if isinstance(value, str) else None


async def _refuse(send: Send, status: int, detail: str) -> None:
    body = json.dumps({"detail": detail}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": body})
