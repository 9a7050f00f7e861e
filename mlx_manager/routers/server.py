"""Server page: the engine's charts (decode and prefill tokens/s, queue, running sequences,
prompt-cache hit rate, memory, updated live), the model pool (loaded models, memory, last use,
pins), its limits (stored, applied live) and unload-all; plus the pool indicator every page
shows in its header."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Form, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from sqlmodel import Session

from mlx_manager.deps import SessionDep
from mlx_manager.web.charts import DEFAULT_MINUTES, SPANS, engine_charts
from mlx_manager.web.templating import render, templates, wants_fragment
from mlx_server.facade import (
    engine_samples,
    get_server_settings,
    pool_limits,
    pool_status,
    reset_pool_limits,
    set_pool_limits,
)
from mlx_server.facade import unload_all as unload_all_models

router = APIRouter(prefix="/server")


def _charts(minutes: int) -> dict[str, Any]:
    """The charts' context: the samples of the span drawn (one of SPANS, else the hour), polled
    as often as they are taken."""
    minutes = minutes if minutes in SPANS else DEFAULT_MINUTES
    interval = get_server_settings().engine_sample_seconds
    return {
        "charts": engine_charts(engine_samples(minutes * 60), minutes, interval),
        "minutes": minutes,
        "spans": SPANS,
        "interval": f"{interval:g}",
        "poll_seconds": f"{max(1.0, interval):g}",
    }


def _page(
    request: Request,
    session: Session,
    *,
    message: str | None = None,
    error: str | None = None,
    minutes: int = DEFAULT_MINUTES,
) -> HTMLResponse:
    return render(
        request,
        "server.html",
        "partials/server_pool.html",
        pool=pool_status(),
        limits=pool_limits(session),
        message=message,
        error=error,
        status_code=400 if error else 200,
        **_charts(minutes),
    )


@router.get("", response_class=HTMLResponse)
def server_page(request: Request, session: SessionDep, minutes: int = DEFAULT_MINUTES) -> HTMLResponse:
    return _page(request, session, minutes=minutes)


@router.get("/charts", response_class=HTMLResponse)
def charts(request: Request, minutes: int = DEFAULT_MINUTES) -> HTMLResponse:
    """The charts alone: the page polls them."""
    return templates.TemplateResponse(request, "partials/server_charts.html", _charts(minutes))


@router.get("/indicator", response_class=HTMLResponse)
def pool_indicator(request: Request) -> HTMLResponse:
    return templates.TemplateResponse(request, "partials/pool_indicator.html", {})


@router.post("/limits", response_class=HTMLResponse)
def set_limits(
    request: Request,
    session: SessionDep,
    max_memory_gb: Annotated[float, Form()],
    max_models: Annotated[int, Form()],
    idle_ttl_seconds: Annotated[float, Form()],
) -> Response:
    try:
        set_pool_limits(
            session, max_memory_gb=max_memory_gb, max_models=max_models, idle_ttl_seconds=idle_ttl_seconds
        )
    except ValueError as exc:
        return _page(request, session, error=str(exc))
    return _done(request, session, "Limits saved and applied.")


@router.post("/limits/reset", response_class=HTMLResponse)
def reset_limits(request: Request, session: SessionDep) -> Response:
    reset_pool_limits(session)
    return _done(request, session, "Limits are the environment's again.")


@router.post("/unload-all", response_class=HTMLResponse)
async def unload_all(request: Request, session: SessionDep) -> Response:
    unloaded = await unload_all_models()
    return _done(request, session, f"Unloaded {len(unloaded)} model{'' if len(unloaded) == 1 else 's'}.")


def _done(request: Request, session: Session, message: str) -> Response:
    if wants_fragment(request):
        return _page(request, session, message=message)
    return RedirectResponse("/server", status_code=303)  # post/redirect/get for a plain form
