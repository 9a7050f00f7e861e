"""Server-rendered pages: dashboard home, models, audit log, settings."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Request
from fastapi.responses import HTMLResponse

from mlx_manager.config import ManagerSettings, get_manager_settings
from mlx_manager.templating import render
from mlx_server.config import get_settings as get_server_settings
from mlx_server.database import SessionDep, database_status
from mlx_server.models.store import list_models

router = APIRouter()

SettingsDep = Annotated[ManagerSettings, Depends(get_manager_settings)]


@router.get("/", response_class=HTMLResponse)
def home(request: Request, session: SessionDep) -> HTMLResponse:
    models = list_models(session)
    base_url = f"{request.base_url}v1"  # as the browser reached us, not the bind address
    return render(request, "index.html", models=models, database=database_status(), base_url=base_url)


@router.get("/settings", response_class=HTMLResponse)
def settings_page(request: Request, settings: SettingsDep) -> HTMLResponse:
    server = get_server_settings()
    rows = [
        ("MLX_MANAGER_HOME", str(settings.home), "Database file and imported models"),
        ("MLX_MANAGER_HOST", settings.host, "Dashboard bind address"),
        ("MLX_MANAGER_PORT", str(settings.port), "Dashboard port"),
        ("MLX_MANAGER_IMPORT_DEFAULT_MODEL", str(settings.import_default_model), "Import SmolLM2 when empty"),
        ("MLX_SERVER_PORT", str(server.port), "Port of the standalone mlx-server"),
    ]
    return render(request, "settings.html", rows=rows, database_path=server.database_path)
