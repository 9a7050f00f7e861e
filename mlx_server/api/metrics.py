"""GET /metrics (Prometheus text format), standalone at the server's root and in the manager.

Who may scrape, the README's rule: anyone when MLX_SERVER_METRICS_PUBLIC is set; anyone while
API keys are not needed (loopback, none created, as for /v1) and, in the manager, the dashboard
needs no login either; otherwise a dashboard session (the manager's pages) or an active API key
with the admin scope (`Authorization: Bearer`, as Prometheus' `authorization` scrape setting
sends it).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from fastapi import APIRouter, Request
from fastapi.responses import PlainTextResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST
from sqlmodel import Session

from mlx_server.api.key_middleware import sent_key
from mlx_server.config import get_settings
from mlx_server.database import SessionDep
from mlx_server.records import ApiKeyScope
from mlx_server.services.operations.api_keys import KeyState, find_api_key, key_state, keys_required
from mlx_server.services.operations.metrics import ServerMetrics

PUBLIC_HINT = "or set MLX_SERVER_METRICS_PUBLIC=true to serve them to anyone who reaches the port"


@dataclass(frozen=True)
class PageAccess:
    """The manager's dashboard as /metrics sees it: whether a request has a session, and
    whether the pages need one at all."""

    logged_in: Callable[[Request], bool]
    login_required: Callable[[], bool]


def metrics_refusal(session: Session, request: Request, page_access: PageAccess | None) -> Response | None:
    """Why this scrape is refused (401/403, plain text), or None when it may have the metrics."""
    settings = get_settings()
    if settings.metrics_public or (page_access is not None and page_access.logged_in(request)):
        return None
    secret = sent_key(request.headers)
    open_pages = page_access is None or not page_access.login_required()
    if open_pages and not keys_required(session, settings.host):
        return None
    key = find_api_key(session, secret) if secret else None
    state = key_state(key) if key is not None else None
    scope = key.scope if key is not None else None
    if key is None or state is not KeyState.ACTIVE:
        problem = "The API key is not valid or no longer active" if secret else "No API key was sent"
        return PlainTextResponse(
            f"{problem}. /metrics needs an active API key with the admin scope (Authorization: "
            f"Bearer <key>){' or a dashboard login' if page_access else ''}, {PUBLIC_HINT}.\n",
            status_code=401,
            headers={"WWW-Authenticate": "Bearer"},
        )
    if scope != ApiKeyScope.ADMIN:
        return PlainTextResponse(
            f"The API key {key.name!r} has the inference scope; /metrics needs a key with the admin "
            f"scope, {PUBLIC_HINT}.\n",
            status_code=403,
        )
    return None


def metrics_router(metrics: ServerMetrics, page_access: PageAccess | None = None) -> APIRouter:
    """The /metrics route for `metrics` (one app's), behind the rule in the module docstring."""
    router = APIRouter()

    @router.get("/metrics", include_in_schema=False)
    async def scrape(
        request: Request, session: SessionDep
    ) -> Response:  # on the loop, where the pool is changed
        refusal = metrics_refusal(session, request, page_access)
        if refusal is not None:
            return refusal
        return Response(metrics.exposition(), media_type=CONTENT_TYPE_LATEST)

    return router
