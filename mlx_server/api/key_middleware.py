"""API keys on /v1 and /api (Ollama's): who may call, with what scope, within which limits.

Pure ASGI, inside the audit middleware (a refused request still gets its audit row, and an
admitted one carries its key's name). Keys are read from `Authorization: Bearer` (OpenAI,
Ollama) or `x-api-key` (Anthropic); refusals are in the route's protocol: Anthropic's shape for
/v1/messages, Ollama's for /api, OpenAI's for the rest. The policy is services/operations/api_keys.py's.
"""

from __future__ import annotations

from collections.abc import Callable

from sqlmodel import Session
from starlette.datastructures import Headers
from starlette.requests import Request
from starlette.types import ASGIApp, Receive, Scope, Send

from mlx_server.api.audit_middleware import audit_details, full_path, is_audited
from mlx_server.api.error_shapes import shaped_error
from mlx_server.config import MLXServerSettings, get_settings
from mlx_server.database import background_session
from mlx_server.errors import APIError
from mlx_server.records import ApiKey, ApiKeyScope
from mlx_server.services.operations.api_keys import (
    CREATE_KEY_HINT,
    KeyState,
    find_api_key,
    key_state,
    keys_required,
)
from mlx_server.services.operations.key_limits import limit_refusal

ADMIN_PREFIX = "/v1/admin"


def sent_key(headers: Headers) -> str | None:
    """The key a client sent: `Authorization: Bearer <key>`, else `x-api-key`."""
    scheme, _, credentials = headers.get("authorization", "").partition(" ")
    if scheme.lower() == "bearer" and credentials.strip():
        return credentials.strip()
    return headers.get("x-api-key", "").strip() or None


def _unauthorized(message: str) -> APIError:
    return APIError(401, message, code="invalid_api_key", headers={"WWW-Authenticate": "Bearer"})


def check_key(
    session: Session, secret: str | None, path: str, host: str
) -> tuple[ApiKey | None, APIError | None]:
    """The key admitted for this request (None when none is needed), or the refusal."""
    if not keys_required(session, host):
        return None, None
    if secret is None:
        return None, _unauthorized(f"This server requires an API key. {CREATE_KEY_HINT}")
    key = find_api_key(session, secret)
    if key is None:
        return None, _unauthorized("The API key is not valid. Check the key, or create a new one.")
    state = key_state(key)
    if state is KeyState.REVOKED:
        return key, _unauthorized(f"The API key {key.name!r} was revoked. Use another key.")
    if state is KeyState.EXPIRED:
        return key, _unauthorized(f"The API key {key.name!r} expired at {key.expires_at:%Y-%m-%d %H:%M} UTC.")
    if (path == ADMIN_PREFIX or path.startswith(ADMIN_PREFIX + "/")) and key.scope != ApiKeyScope.ADMIN:
        return key, APIError(
            403,
            f"The API key {key.name!r} has the inference scope; /v1/admin routes need a key with the "
            "admin scope.",
            code="insufficient_scope",
        )
    return key, limit_refusal(session, key)


class ApiKeyMiddleware:
    """Admits a /v1 request (recording its key's name for the audit row) or answers 401/403/429."""

    def __init__(self, app: ASGIApp, settings: Callable[[], MLXServerSettings] = get_settings) -> None:
        self.app = app
        self.settings = settings

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = full_path(scope) if scope["type"] == "http" else ""
        if not is_audited(path):  # /v1/health and anything outside /v1 and /api need no key
            await self.app(scope, receive, send)
            return
        with background_session() as session:
            key, error = check_key(session, sent_key(Headers(scope=scope)), path, self.settings().host)
        if key is not None:
            audit_details(Request(scope)).key_name = key.name
        if error is None:
            await self.app(scope, receive, send)
            return
        await shaped_error(scope, error)(scope, receive, send)
