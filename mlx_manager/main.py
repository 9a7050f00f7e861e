"""FastAPI app for the manager: pages, static files, and the inference server at /v1 and /api."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager

from fastapi import FastAPI, Request
from fastapi.responses import PlainTextResponse
from fastapi.staticfiles import StaticFiles
from starlette.types import Scope

from mlx_manager.config import ManagerSettings, get_manager_settings, use_manager_settings
from mlx_manager.routers import (
    admin_api,
    audit,
    backends,
    benchmarks,
    chat,
    chat_stream,
    chat_voice,
    cluster,
    downloads,
    embeddings,
    hub,
    keys,
    login,
    lora_adapters,
    mcp,
    model_disk,
    models,
    pages,
    server,
)
from mlx_manager.routers.settings import router as settings_router
from mlx_manager.services.chat_jobs import chat_services
from mlx_manager.services.conversion_jobs import conversion_services
from mlx_manager.services.downloads import download_services
from mlx_manager.services.model_benchmarks import benchmark_services
from mlx_manager.services.ollama_pulls import pulls_for_ollama
from mlx_manager.services.probe_jobs import probe_services
from mlx_manager.web.csrf import CSRFMiddleware
from mlx_manager.web.login import LOGGED_IN_STATE, LoginMiddleware
from mlx_manager.web.templating import STATIC_PACKAGE_DIR
from mlx_server.facade import (
    ContainErrors,
    GuardPolicy,
    PageAccess,
    PathAliases,
    RequestGuard,
    __version__,
    configure_tracing,
    create_server_app,
    health_router,
    metrics_router,
    server_services,
    use_server_settings,
)


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    """The embedded server has no lifespan of its own: the manager runs the server's services,
    then its own (hub downloads, resumed where a previous run left them; pulls for Ollama's
    /api/pull; the first probes; conversions; chat turns; model benchmarks)."""
    async with (
        server_services(),
        download_services(),
        pulls_for_ollama(),
        probe_services(app.state.probe_at_start),
        conversion_services(),
        chat_services(),
        benchmark_services(),
    ):
        yield


def _refused(_scope: Scope, status: int, message: str) -> PlainTextResponse:
    return PlainTextResponse(message, status_code=status)


def _page_failed(_scope: Scope) -> PlainTextResponse:
    return PlainTextResponse(
        "The dashboard failed on this request; its log has the details. Reload, or report it if it "
        "keeps happening.",
        status_code=500,
    )


def _logged_in(request: Request) -> bool:
    """A dashboard session, as web/login.py marked the request."""
    return bool(request.scope.get("state", {}).get(LOGGED_IN_STATE))


# /metrics: a session, or open while neither the pages nor /v1 need a credential.
_DASHBOARD_ACCESS = PageAccess(
    logged_in=_logged_in, login_required=lambda: get_manager_settings().login_required
)


def create_app(settings: ManagerSettings | None = None, *, probe_at_start: Sequence[str] = ()) -> FastAPI:
    """The dashboard and both server apps; `probe_at_start`: models probed in the background once
    the app has started (`serve` passes the default models it has just imported)."""
    settings = settings or get_manager_settings()
    use_manager_settings(settings)  # pages see what the app was created with (serve --host)
    # The embedded server must use the manager's database and models, whatever
    # MLX_SERVER_HOME says.
    use_server_settings(settings.server_settings())

    app = FastAPI(title="MLX Manager", version=__version__, lifespan=lifespan)
    app.state.probe_at_start = tuple(probe_at_start)
    # Innermost: a page's unexpected error is a 500 that keeps the connection (api/error_shapes.py).
    app.add_middleware(ContainErrors, respond=_page_failed)
    page_routers = [
        m.router
        for m in (
            pages,
            model_disk,  # before models: its /models/{id} would take /models/discovered
            models,
            server,
            benchmarks,
            chat,
            chat_stream,
            chat_voice,
            embeddings,
            audit,
            hub,
            downloads,
            keys,
            backends,
            cluster,
            login,
            lora_adapters,
            mcp,
        )
    ]
    for router in (health_router, *page_routers, settings_router):
        app.include_router(router)
    app.mount("/static", StaticFiles(packages=[STATIC_PACKAGE_DIR]), name="static")
    # The manager's admin routes (pulls, deleting a model) live under /v1/admin with the server's.
    server_app = create_server_app(embedded=True, host_names=(settings.host,), routers=(admin_api.router,))
    app.include_router(metrics_router(server_app.state.metrics, page_access=_DASHBOARD_ACCESS))
    app.mount("/v1", server_app)
    # Ollama's API: its own server app where Ollama's clients look (/api/chat ...), counted in
    # the same /metrics.
    ollama_app = create_server_app(
        embedded=True, host_names=(settings.host,), mount="/api", metrics=server_app.state.metrics
    )
    app.mount("/api", ollama_app)
    app.add_middleware(CSRFMiddleware)
    app.add_middleware(LoginMiddleware)  # outside CSRF: no session, no form handling at all
    # Host allow-list and body limits for the pages; /v1 and /api guard themselves (errors in
    # their protocols').
    policy = GuardPolicy.from_settings(settings.server_settings(), (settings.host,))
    app.add_middleware(RequestGuard, policy=policy, refuse=_refused, cross_site=False, exempt=("/v1", "/api"))
    app.add_middleware(PathAliases)  # outermost: /rerank, /tokenize, /detokenize are /v1's
    configure_tracing(token=settings.logfire_token, service_name="mlx-manager")
    return app
