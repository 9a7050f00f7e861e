"""Server-rendered pages: the dashboard home (the other pages have routers of their own)."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, Response

from mlx_manager.deps import SessionDep
from mlx_manager.web.templating import render
from mlx_server.facade import database_status, list_models

router = APIRouter()


@router.get("/", response_class=HTMLResponse)
def home(request: Request, session: SessionDep) -> HTMLResponse:
    models = list_models(session)
    base_url = f"{request.base_url}v1"  # as the browser reached us, not the bind address
    return render(request, "index.html", models=models, database=database_status(), base_url=base_url)


@router.head("/", include_in_schema=False)
def heartbeat() -> Response:
    """Ollama's clients check `HEAD /` before their first request (its Go client's Heartbeat);
    open without a session like /health: it says nothing but that the server is up."""
    return Response()
