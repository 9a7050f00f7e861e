"""Benchmarks: the table of every model's runs (GET /benchmarks), a run started from a model's
page or this one (a job whose widget polls itself while it runs), stopped, or a row deleted."""

from __future__ import annotations

from html import escape
from typing import Annotated

from fastapi import APIRouter, Form, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from sqlmodel import Session

from mlx_manager.deps import RowId, SessionDep
from mlx_manager.services.local_models import local_models
from mlx_manager.services.model_benchmarks import (
    BENCHMARKABLE,
    RUN_SIZES,
    benchmark_rows,
    delete_benchmark,
    get_benchmark_jobs,
    running_benchmark,
    start_benchmark,
    stop_benchmark,
)
from mlx_manager.web.templating import render, templates, wants_fragment
from mlx_server.facade import APIError

router = APIRouter(prefix="/benchmarks")

JOB = "partials/benchmark_job.html"
TABLE = "partials/benchmark_table.html"


def _page(request: Request, session: Session, *, error: str | None = None, status: int = 200) -> HTMLResponse:
    models = [m.id for m in local_models(session) if m.model_type in BENCHMARKABLE]
    return render(
        request,
        "benchmarks.html",
        status_code=status,
        runs=benchmark_rows(session),
        job=running_benchmark(),
        models=models,
        error=error,
        sizes=RUN_SIZES,
    )


@router.get("", response_class=HTMLResponse)
def benchmarks_page(request: Request, session: SessionDep) -> HTMLResponse:
    return _page(request, session)


@router.get("/table", response_class=HTMLResponse)
def table(request: Request, session: SessionDep, model_id: str | None = None) -> HTMLResponse:
    """The results (of one model, on its page); refreshed when a run ends."""
    runs = benchmark_rows(session, model_id)
    return templates.TemplateResponse(request, TABLE, {"runs": runs, "scope": model_id})


@router.post("", response_class=HTMLResponse)
async def start(
    request: Request,
    session: SessionDep,
    model_id: Annotated[str, Form(max_length=255)],
    prompt_tokens: Annotated[int, Form()] = RUN_SIZES.prompt_tokens,
    generated_tokens: Annotated[int, Form()] = RUN_SIZES.generated_tokens,
) -> Response:
    """Check the run at once (a clear refusal), then benchmark in the background (an asyncio
    task of the app: hence async)."""
    try:
        job = start_benchmark(model_id, prompt_tokens=prompt_tokens, generated_tokens=generated_tokens)
    except APIError as exc:
        if not wants_fragment(request):
            return _page(request, session, error=exc.message, status=exc.status)
        refusal = f'<p class="error" role="alert" data-testid="benchmark-error">{escape(exc.message)}</p>'
        return HTMLResponse(refusal, status_code=exc.status)
    if not wants_fragment(request):
        return RedirectResponse("/benchmarks", status_code=303)
    return templates.TemplateResponse(request, JOB, {"job": job}, status_code=202)


@router.get("/jobs/{model_id:path}", response_class=HTMLResponse)
def job_widget(request: Request, model_id: str) -> Response:
    """A run's widget: progress while it runs (it polls itself), then its figures; the poll that
    finds it ended tells the page's tables to refresh (`benchmark-done`)."""
    job = get_benchmark_jobs().get(model_id)
    if job is None:
        return HTMLResponse(f"<p>No benchmark of {escape(model_id)} in this run of the app.</p>", 404)
    response = templates.TemplateResponse(request, JOB, {"job": job})
    if job.finished:
        response.headers["HX-Trigger"] = "benchmark-done"
    return response


@router.post("/jobs/{model_id:path}/stop", response_class=HTMLResponse)
async def stop(request: Request, session: SessionDep, model_id: str) -> Response:
    job = stop_benchmark(model_id)
    if job is None:
        message = f"No benchmark of {model_id} is running."
        if not wants_fragment(request):
            return _page(request, session, error=message, status=404)
        return HTMLResponse(f'<p class="error" role="alert">{escape(message)}</p>', 404)
    await job.ended_within(10)
    if not wants_fragment(request):
        return RedirectResponse("/benchmarks", status_code=303)
    return job_widget(request, model_id)


@router.post("/{run_id}/delete", response_class=HTMLResponse)
def delete(request: Request, session: SessionDep, run_id: RowId) -> Response:
    delete_benchmark(session, run_id)
    if wants_fragment(request):
        return HTMLResponse("")  # the row goes away
    return RedirectResponse("/benchmarks", status_code=303)
