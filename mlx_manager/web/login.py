"""The dashboard's login gate: every page needs a valid session cookie when login is required.

Login is required whenever the bind is not loopback, and on loopback when MLX_MANAGER_REQUIRE_LOGIN
is set (ManagerSettings.login_required). /v1 and /api have their own keys; /static, /health and the login
pages are open. A page asked for without a session is redirected to /login (htmx requests get
`HX-Redirect`, other methods a 401).
"""

from __future__ import annotations

from collections.abc import Callable
from http.cookies import SimpleCookie
from urllib.parse import quote

from fastapi.responses import PlainTextResponse, RedirectResponse, Response
from starlette.datastructures import Headers
from starlette.types import ASGIApp, Receive, Scope, Send

from mlx_manager.config import ManagerSettings, get_manager_settings
from mlx_manager.services.admin_account import SESSION_COOKIE, session_is_valid
from mlx_server.facade import background_session

OPEN_PREFIXES = ("/v1", "/api/", "/static/")
OPEN_PATHS = frozenset({"/health", "/login", "/login/setup", "/logout", "/favicon.ico"})
# Decides itself (api/metrics.py): a session as marked here, or an admin API key for a scraper.
SELF_CHECKED_PATHS = frozenset({"/metrics"})
LOGGED_IN_STATE = "logged_in"
# Ollama's clients' heartbeat; it answers 200 and nothing else (routers/pages.py).
OPEN_HEARTBEAT = ("HEAD", "/")


def session_cookie(headers: Headers) -> str | None:
    jar: SimpleCookie = SimpleCookie()
    jar.load(headers.get("cookie", ""))
    return jar[SESSION_COOKIE].value if SESSION_COOKIE in jar else None


def _login_redirect(scope: Scope, headers: Headers) -> Response:
    target = "/login?next=" + quote(
        scope["path"] + (f"?{scope['query_string'].decode()}" if scope["query_string"] else "")
    )
    if headers.get("hx-request") == "true":
        return PlainTextResponse("Log in first.", status_code=401, headers={"HX-Redirect": target})
    if scope["method"] in ("GET", "HEAD"):
        return RedirectResponse(target, status_code=303)
    return PlainTextResponse("Log in first: this dashboard requires the admin password.", status_code=401)


class LoginMiddleware:
    """Pure ASGI (SSE pages stream through); marks `state.logged_in` for the templates."""

    def __init__(self, app: ASGIApp, settings: Callable[[], ManagerSettings] = get_manager_settings) -> None:
        self.app = app
        self.settings = settings

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "") if scope["type"] == "http" else ""
        if not path or path.startswith(OPEN_PREFIXES) or (scope["method"], path) == OPEN_HEARTBEAT:
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        cookie = session_cookie(headers)
        if cookie is None:
            logged_in = False
        else:
            with background_session() as session:
                logged_in = session_is_valid(session, cookie)
        scope.setdefault("state", {})[LOGGED_IN_STATE] = logged_in
        if logged_in or path in OPEN_PATHS | SELF_CHECKED_PATHS or not self.settings().login_required:
            await self.app(scope, receive, send)
            return
        await _login_redirect(scope, headers)(scope, receive, send)
