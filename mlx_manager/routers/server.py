"""Server page: the model pool (loaded models, memory, last use, pins), its limits (stored,
applied live) and unload-all; plus the pool indicator every page shows in its header."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Form, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from mlx_manager.web.templating import render, templates, wants_fragment
from mlx_server.facade import pool_limits, pool_status, reset_pool_limits, set_pool_limits
from mlx_server.facade import unload_all as unload_all_models

router = APIRouter(prefix="/server")


def _page(request: Request, *, message: str | None = None, error: str | None = None) -> HTMLResponse:
    return render(
        request,
        "server.html",
        "partials/server_pool.html",
        pool=pool_status(),
        limits=pool_limits(),
        message=message,
        error=error,
        status_code=400 if error else 200,
    )


@router.get("", response_class=HTMLResponse)
def server_page(request: Request) -> HTMLResponse:
    return _page(request)


@router.get("/indicator", response_class=HTMLResponse)
def pool_indicator(request: Request) -> HTMLResponse:
    return templates.TemplateResponse(request, "partials/pool_indicator.html", {})


@router.post("/limits", response_class=HTMLResponse)
def set_limits(
    request: Request,
    max_memory_gb: Annotated[float, Form()],
    max_models: Annotated[int, Form()],
    idle_ttl_seconds: Annotated[float, Form()],
) -> Response:
    try:
        set_pool_limits(max_memory_gb=max_memory_gb, max_models=max_models, idle_ttl_seconds=idle_ttl_seconds)
    except ValueError as exc:
        return _page(request, error=str(exc))
    return _done(request, "Limits saved and applied.")


@router.post("/limits/reset", response_class=HTMLResponse)
def reset_limits(request: Request) -> Response:
    reset_pool_limits()
    return _done(request, "Limits are the environment's again.")


@router.post("/unload-all", response_class=HTMLResponse)
async def unload_all(request: Request) -> Response:
    unloaded = await unload_all_models()
    return _done(request, f"Unloaded {len(unloaded)} model{'' if len(unloaded) == 1 else 's'}.")


def _done(request: Request, message: str) -> Response:
    if wants_fragment(request):
        return _page(request, message=message)
    return RedirectResponse("/server", status_code=303)  # post/redirect/get for a plain form
