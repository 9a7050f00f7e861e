"""FastAPI app factory for the inference server (embedded in the manager, or standalone)."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

from fastapi import APIRouter, FastAPI
from fastapi.responses import JSONResponse, PlainTextResponse

from mlx_server import __version__
from mlx_server.api.audit_middleware import AuditMiddleware
from mlx_server.api.error_shapes import install_error_handlers
from mlx_server.api.key_middleware import ApiKeyMiddleware
from mlx_server.api.metrics import metrics_router
from mlx_server.api.ollama import router as ollama_router
from mlx_server.api.path_aliases import PathAliases
from mlx_server.api.request_guard import GuardPolicy, RequestGuard
from mlx_server.api.timeouts import RequestTimeout
from mlx_server.api.v1 import router as v1_router
from mlx_server.config import get_settings
from mlx_server.database import database_status, upgrade_database
from mlx_server.distributed.node_ranks import stop_node_ranks
from mlx_server.distributed.service import reset_sharded
from mlx_server.models.pool import get_model_pool, reset_model_pool
from mlx_server.models.prompt_cache_store import reset_prompt_cache_disk
from mlx_server.observability import configure_tracing
from mlx_server.services.operations.audit import audit_service, mark_interrupted
from mlx_server.services.operations.engine_samples import start_engine_sampling
from mlx_server.services.operations.metrics import ServerMetrics
from mlx_server.services.operations.model_registration import cancel_arrival_probes
from mlx_server.services.operations.pool_admin import apply_stored_pool_limits
from mlx_server.services.operations.responses_store import prune_expired_responses
from mlx_server.services.operations.scheduler import get_scheduler, schedule_every, stop_scheduler

AUDIT_RETENTION_JOB = "audit-retention"
AUDIT_RETENTION_INTERVAL_S = 3600
RESPONSES_RETENTION_JOB = "responses-retention"
POOL_IDLE_JOB = "pool-idle-sweep"

health_router = APIRouter()
root_router = APIRouter()


@root_router.api_route("/", methods=["GET", "HEAD"], include_in_schema=False)
def root() -> PlainTextResponse:
    """What Ollama's root answers: its clients' heartbeat (`HEAD /`) and `curl /` check it."""
    return PlainTextResponse("Ollama is running")


@health_router.get("/health")
def health() -> JSONResponse:
    """Liveness plus the state of the shared database."""
    database = database_status()
    body: dict[str, Any] = {
        "status": "ok" if database["status"] == "ok" else "degraded",
        "version": __version__,
        "database": {k: v for k, v in database.items() if k != "models"},
        "models": database["models"],
    }
    return JSONResponse(body, status_code=200 if body["status"] == "ok" else 503)


async def _evict_idle_models() -> None:
    await get_model_pool().evict_idle()


@asynccontextmanager
async def server_services() -> AsyncIterator[None]:
    """What the server needs while it serves, for whichever app owns the lifespan.

    Migrates the database, marks audit rows a killed run left in flight as interrupted, starts
    the audit writer and the scheduler (audit retention now and hourly, the idle sweep, the
    engine samples the Server page charts); on exit stops the scheduler and writes the audit
    rows still queued.
    Further periodic jobs: `schedule_every(...)` here, before the scheduler starts.

    Then it freezes the garbage collector's view of what exists (gc.freeze): the ~200 000
    objects of mlx, mlx-lm and transformers live as long as the process, and scanning them made
    every full collection a ~130 ms pause in whichever request or token was running.
    """
    upgrade_database()
    mark_interrupted()  # rows a killed run left in flight
    audit_service.start()
    audit_service.prune_expired()
    scheduler = get_scheduler()
    # Another app in this process (a test's second server) may run it already; its owner stops it.
    owns_scheduler = not scheduler.running
    schedule_every(
        audit_service.prune_expired, job_id=AUDIT_RETENTION_JOB, seconds=AUDIT_RETENTION_INTERVAL_S
    )
    # Stored Responses API responses follow the audit log's retention.
    schedule_every(
        prune_expired_responses, job_id=RESPONSES_RETENTION_JOB, seconds=AUDIT_RETENTION_INTERVAL_S
    )
    apply_stored_pool_limits()
    # Always scheduled: the TTL can be changed from the dashboard while the server runs (0 makes
    # the sweep a no-op). A model outlives its TTL by at most a quarter of it (≤ 60 s).
    idle_ttl = get_model_pool().idle_ttl_seconds
    sweep_seconds = min(60.0, max(1.0, idle_ttl / 4)) if idle_ttl > 0 else 60.0
    schedule_every(_evict_idle_models, job_id=POOL_IDLE_JOB, seconds=sweep_seconds)
    start_engine_sampling()  # the Server page's charts
    if owns_scheduler:
        scheduler.start()
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()  # a later app in this process (tests) starts from a collectable heap
        if owns_scheduler:
            await stop_scheduler()
        await cancel_arrival_probes()
        # The pool's lock and tasks belong to this event loop; the next app gets a fresh pool.
        await get_model_pool().unload_all()  # a sharded model's ranks end with its entry
        reset_model_pool()
        reset_sharded()
        stop_node_ranks()  # the ranks this machine runs for another server's sharded models
        # The unloads handed their prompt caches' long entries to the disk tier's writer: they
        # are written now, and the next start reads the directory afresh, as a new process would.
        await asyncio.to_thread(reset_prompt_cache_disk)
        # Drains the queue; a request of another app still running restarts the writer on record.
        await asyncio.to_thread(audit_service.stop)


@asynccontextmanager
async def migrate_on_start(_app: FastAPI) -> AsyncIterator[None]:
    """Lifespan of an app that owns the database: migrate it, then run the server's services."""
    async with server_services():
        yield


def create_app(
    embedded: bool = False,
    host_names: tuple[str, ...] = (),
    mount: str = "/v1",
    metrics: ServerMetrics | None = None,
    routers: Sequence[APIRouter] = (),
) -> FastAPI:
    """Build the server app.

    Embedded: mounted by the manager at `mount`, shares its database and lifespan; it serves
    the routes of that prefix: /v1 (OpenAI, Anthropic, admin) or /api (Ollama).
    Standalone: serves /v1/... and /api/... itself and runs `server_services()` as its lifespan.
    `host_names`: Host headers to accept besides loopback and the settings' (the manager's bind).
    `metrics`: count into another app's metrics (the manager's apps into one /metrics).
    `routers`: routes the embedding app adds under this app's prefix, behind the same key policy,
    audit and error shapes (the manager's /v1/admin/downloads, DELETE /v1/admin/models/{id}).
    """
    settings = get_settings()
    app = FastAPI(
        title="MLX Server",
        version=__version__,
        lifespan=None if embedded else migrate_on_start,
    )
    install_error_handlers(app)
    # Innermost: a request stopped at its deadline still passes back out through the others.
    timeouts = settings.endpoint_timeouts
    app.add_middleware(RequestTimeout, default=settings.timeout_seconds, per_endpoint=timeouts)
    # Innermost of the three: a request from a refused Host or with an oversized body never
    # reaches the key check, and the audit row still gets the key's name.
    app.add_middleware(ApiKeyMiddleware)
    # Inside the audit middleware: refused requests get their audit row too.
    policy = GuardPolicy.from_settings(settings, (settings.host, *host_names))
    app.add_middleware(RequestGuard, policy=policy)
    # The app's own metrics (app.state.metrics): the manager serves them at its /metrics.
    app.state.metrics = metrics = metrics or ServerMetrics()
    app.add_middleware(AuditMiddleware, metrics=metrics)
    app.include_router(health_router)
    if not embedded:
        app.include_router(root_router)
        app.include_router(metrics_router(metrics))
    if not embedded or mount == "/v1":
        app.include_router(v1_router, prefix="" if embedded else "/v1")
    if not embedded or mount == "/api":
        app.include_router(ollama_router, prefix="" if embedded else "/api")
    for router in routers:
        app.include_router(router)
    if not embedded:
        app.add_middleware(PathAliases)  # outermost: /rerank is /v1/rerank from the start
        configure_tracing(token=settings.logfire_token, service_name="mlx-server")
    return app
