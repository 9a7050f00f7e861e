"""FastAPI app factory for the inference server (embedded in the manager, or standalone)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import APIRouter, FastAPI
from fastapi.responses import JSONResponse

from mlx_server import __version__
from mlx_server.api.v1 import router as v1_router
from mlx_server.config import get_settings
from mlx_server.database import database_status, upgrade_database
from mlx_server.errors import install_error_handlers
from mlx_server.observability import instrument

health_router = APIRouter()


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


@asynccontextmanager
async def migrate_on_start(_app: FastAPI) -> AsyncIterator[None]:
    """Lifespan of an app that owns the database: bring it to the newest migration."""
    upgrade_database()
    yield


def create_app(embedded: bool = False) -> FastAPI:
    """Build the server app.

    Embedded: mounted by the manager at /v1, shares its database and lifespan.
    Standalone: serves /v1/... itself and migrates the database on start.
    """
    app = FastAPI(
        title="MLX Server",
        version=__version__,
        lifespan=None if embedded else migrate_on_start,
    )
    install_error_handlers(app)
    app.include_router(health_router)
    app.include_router(v1_router, prefix="" if embedded else "/v1")
    if not embedded:
        instrument(app, token=get_settings().logfire_token, service_name="mlx-server")
    return app
