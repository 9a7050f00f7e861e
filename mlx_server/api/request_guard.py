"""What a request must be before any route sees it: DNS-rebinding, cross-site and size guards.

- Host: an IP address (any port), localhost, or a name configured in `MLX_SERVER_ALLOWED_HOSTS`;
  a page on evil.example that rebinds its name to 127.0.0.1 still sends `Host: evil.example`
  and gets 421. An address is safe to accept: rebinding needs a name the attacker controls.
- Cross-site: a browser can send a "simple" POST (text/plain or a form, no preflight) to any
  origin. State-changing /v1 requests need a JSON (or multipart) content type, and one that a
  browser marks as coming from another site (Origin, Sec-Fetch-Site) is refused unless that
  origin is in `MLX_SERVER_CORS_ORIGINS`; only those origins get CORS headers and preflights.
  A body sent with no Content-Type at all by a client that carries none of a browser's marks
  (Origin, Sec-Fetch-Site, Sec-Fetch-Mode) is read as JSON: litellm's Ollama providers and
  `curl --data-binary -H 'Content-Type:'` send none, as Ollama accepts. Every browser sends
  Origin (and Sec-Fetch-*) with a POST, so a page of another site cannot use this.
- Size: a body larger than the limit is refused with 413 from its Content-Length, or while it
  is read (a receive wrapper counts), so it is never buffered whole.

Pure ASGI, so streamed responses pass through untouched.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from mlx_server.api.error_shapes import protocol_error
from mlx_server.config import MLXServerSettings

LOCAL_NAMES = frozenset({"localhost"})  # addresses need no listing: see host_allowed
ANY_HOST = "*"
UNSAFE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
BODY_TYPES = ("application/json", "multipart/form-data")
# Headers every browser adds to a state-changing request (fetch, forms, no-cors included).
BROWSER_MARKS = ("origin", "sec-fetch-site", "sec-fetch-mode")
JSON_CONTENT_TYPE = (b"content-type", b"application/json")
PREFLIGHT_MAX_AGE = "600"
CORS_ALLOW_HEADERS = "authorization, content-type, x-api-key, anthropic-version, x-request-id"


class BodyTooLarge(HTTPException):
    """Raised by the counting receive while the body is read: nothing past the limit is kept."""


@dataclass(frozen=True)
class GuardPolicy:
    """The guard's settings, read once when the app is built."""

    allowed_hosts: frozenset[str]
    cors_origins: frozenset[str]
    max_body_bytes: int
    max_upload_bytes: int

    @classmethod
    def from_settings(cls, settings: MLXServerSettings, extra_hosts: Iterable[str] = ()) -> GuardPolicy:
        hosts = {h.strip().lower().strip("[]") for h in (*settings.allowed_hosts, *extra_hosts)}
        return cls(
            allowed_hosts=LOCAL_NAMES | frozenset(h for h in hosts if h),
            cors_origins=frozenset(o.rstrip("/").lower() for o in settings.cors_origins),
            max_body_bytes=settings.max_body_bytes,
            max_upload_bytes=settings.max_upload_bytes,
        )

    def host_allowed(self, host: str | None) -> bool:
        if host is None:
            return False
        name = host_name(host)
        return ANY_HOST in self.allowed_hosts or name in self.allowed_hosts or _is_address(name)

    def body_limit(self, content_type: str) -> int:
        return self.max_upload_bytes if content_type.startswith("multipart/") else self.max_body_bytes


def host_name(host: str) -> str:
    """`Host` header -> the name alone: "LocalHost:8080" -> "localhost", "[::1]:80" -> "::1"."""
    host = host.strip().lower()
    if host.startswith("["):
        return host[1 : host.find("]")] if "]" in host else host
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


def _is_address(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def _headers(scope: Scope) -> dict[str, str]:
    return {k.decode("latin-1"): v.decode("latin-1") for k, v in scope.get("headers", [])}


def is_cross_site(headers: dict[str, str], allowed_origins: frozenset[str] = frozenset()) -> bool:
    """Whether a browser says this request comes from a page of another site (not one allowed)."""
    origin = headers.get("origin", "").rstrip("/").lower()
    if origin and origin in allowed_origins:
        return False
    if headers.get("sec-fetch-site") == "cross-site":
        return True
    return bool(origin) and (origin == "null" or urlsplit(origin).netloc != headers.get("host", "").lower())


def limit_body(receive: Receive, limit: int) -> Receive:
    """`receive` that raises BodyTooLarge once more than `limit` bytes have arrived."""
    received = 0

    async def counted() -> Message:
        nonlocal received
        message = await receive()
        received += len(message.get("body", b""))
        if received > limit:
            raise BodyTooLarge(413, too_large_message(limit))
        return message

    return counted


def too_large_message(limit: int) -> str:
    return f"The request body is larger than {limit} bytes, the most this server accepts for it."


def _has_body(headers: dict[str, str]) -> bool:
    length = headers.get("content-length", "")
    return (length.isdigit() and int(length) > 0) or "transfer-encoding" in headers


def untyped_client_body(scope: Scope, headers: dict[str, str]) -> bool:
    """A state-changing request with a body, no Content-Type and no browser marks: a program
    (litellm's Ollama providers, curl -H 'Content-Type:'), whose body is read as JSON."""
    return (
        scope["method"] in UNSAFE_METHODS
        and "content-type" not in headers
        and _has_body(headers)
        and not any(mark in headers for mark in BROWSER_MARKS)
    )


Refuse = Callable[[Scope, int, str], Any]


class RequestGuard:
    """The checks in the module docstring. `cross_site` False leaves cross-site checks to another
    layer (the dashboard's CSRF middleware); `exempt` paths pass untouched (mounted apps that
    guard themselves)."""

    def __init__(
        self,
        app: ASGIApp,
        policy: GuardPolicy,
        refuse: Refuse = protocol_error,
        cross_site: bool = True,
        exempt: tuple[str, ...] = (),
    ) -> None:
        self.app, self.policy, self.refuse = app, policy, refuse
        self.cross_site, self.exempt = cross_site, exempt

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or (self.exempt and scope["path"].startswith(self.exempt)):
            await self.app(scope, receive, send)
            return
        headers = _headers(scope)
        if self.cross_site and untyped_client_body(scope, headers):
            scope = {**scope, "headers": [*scope.get("headers", []), JSON_CONTENT_TYPE]}
            headers["content-type"] = JSON_CONTENT_TYPE[1].decode()
        refusal = self._refusal(scope, headers)
        if refusal is not None:
            await self.refuse(scope, *refusal)(scope, receive, send)
            return
        origin = headers.get("origin", "").rstrip("/").lower()
        if self.cross_site and scope["method"] == "OPTIONS" and "access-control-request-method" in headers:
            await self._preflight(origin, scope, receive, send)
            return
        limit = self.policy.body_limit(headers.get("content-type", ""))
        started = False

        async def send_with_cors(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
                if self.cross_site and origin in self.policy.cors_origins:
                    message["headers"] = [*message.get("headers", []), *_cors_headers(origin)]
            await send(message)

        try:
            await self.app(scope, limit_body(receive, limit), send_with_cors)
        except BodyTooLarge as exc:
            if started:
                raise
            await self.refuse(scope, 413, str(exc.detail))(scope, receive, send)

    def _refusal(self, scope: Scope, headers: dict[str, str]) -> tuple[int, str] | None:
        host = headers.get("host")
        if not self.policy.host_allowed(host):
            return 421, (
                f"This server does not answer to the host name {host!r} (DNS rebinding protection). "
                "If you reach it by that name, add it to MLX_SERVER_ALLOWED_HOSTS."
            )
        content_type = headers.get("content-type", "").split(";")[0].strip().lower()
        length = headers.get("content-length", "")
        if length.isdigit() and int(length) > self.policy.body_limit(content_type):
            return 413, too_large_message(self.policy.body_limit(content_type))
        if not self.cross_site or scope["method"] not in UNSAFE_METHODS:
            return None
        if is_cross_site(headers, self.policy.cors_origins):
            return 403, (
                "Cross-site requests to this API are refused. A browser client on another origin "
                "must be listed in MLX_SERVER_CORS_ORIGINS."
            )
        if (content_type or _has_body(headers)) and content_type not in BODY_TYPES:
            return 415, (
                f"Content-Type {content_type!r} is not accepted: send the body as application/json "
                "(or multipart/form-data for uploads)."
            )
        return None

    async def _preflight(self, origin: str, scope: Scope, receive: Receive, send: Send) -> None:
        if origin not in self.policy.cors_origins:
            await self.refuse(scope, 403, f"The origin {origin!r} may not call this API (CORS).")(
                scope, receive, send
            )
            return
        headers = dict(_cors_headers(origin))
        headers[b"access-control-allow-methods"] = b"GET, POST, PUT, PATCH, DELETE, OPTIONS"
        headers[b"access-control-allow-headers"] = CORS_ALLOW_HEADERS.encode()
        headers[b"access-control-max-age"] = PREFLIGHT_MAX_AGE.encode()
        await send({"type": "http.response.start", "status": 204, "headers": list(headers.items())})
        await send({"type": "http.response.body", "body": b""})


def _cors_headers(origin: str) -> list[tuple[bytes, bytes]]:
    return [(b"access-control-allow-origin", origin.encode("latin-1")), (b"vary", b"Origin")]
