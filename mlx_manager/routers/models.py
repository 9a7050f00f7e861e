"""Models page: local models with their capabilities and pool state; load, pin, unload,
probe, delete, add from disk (a directory in place or copied, a GGUF file), each model's
defaults. Every action is a POST that answers with the model's row for htmx, or redirects back
to the page for a plain form. Discovery and conversion: routers/model_disk.py."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

from fastapi import APIRouter, Form, Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from sqlmodel import Session
from sse_starlette import EventSourceResponse, ServerSentEvent

from mlx_manager.deps import SessionDep
from mlx_manager.services.conversion_jobs import get_convert_jobs
from mlx_manager.services.downloads import get_download_manager
from mlx_manager.services.hub import DEFAULT_AUTHOR, SearchSort, SearchType, search_results
from mlx_manager.services.local_models import (
    LocalModel,
    added_how,
    delete_model,
    disk_usage,
    local_model,
    local_models,
)
from mlx_manager.services.model_benchmarks import RUN_SIZES, benchmark_rows, get_benchmark_jobs
from mlx_manager.services.model_defaults_form import FIELDS, defaults_inputs, save_defaults_form
from mlx_manager.services.model_options_form import options_view, save_options_form
from mlx_manager.services.probe_jobs import ProbeJob, get_probe_jobs, start_probe
from mlx_manager.web.templating import render, templates, wants_fragment
from mlx_server.facade import (
    CONVERT_BITS,
    CONVERT_GROUP_SIZES,
    APIError,
    GGUFImportError,
    GGUFInfo,
    GGUFQuantization,
    ModelDefaultsError,
    ModelStoreError,
    adapter_views,
    add_model_from_disk,
    get_model,
    get_server_settings,
    import_gguf,
    inspect_gguf,
    load_model,
    model_defaults,
    remote_model_ids,
    set_pinned,
    unload_model,
)

router = APIRouter(prefix="/models")


@dataclass
class GGUFPlan:
    """The import form's inspection: the file asked about, and what it holds or why not."""

    path: str
    info: GGUFInfo | None = None
    error: str | None = None


# How long a probe watcher waits before re-sending the panel (keeps proxies from timing out).
PROBE_EVENT_SECONDS = 15


def _page(
    request: Request,
    session: Session,
    *,
    message: str | None = None,
    error: str | None = None,
    status: int = 400,
    hub: dict[str, Any] | None = None,
    plan: GGUFPlan | None = None,
) -> HTMLResponse:
    models = local_models(session)
    response = render(
        request,
        "models.html",
        models=models,
        remote_models=[model_id for model_id, _ in remote_model_ids(session)],
        disk=disk_usage(models),
        probes=get_probe_jobs(),
        jobs=get_download_manager().list(),
        conversions=get_convert_jobs().jobs(),
        convert_bits=CONVERT_BITS,
        convert_group_sizes=CONVERT_GROUP_SIZES,
        hub=hub,
        plan=plan,
        message=message,
        error=error,
    )
    response.status_code = status if error else 200
    return response


def _row(request: Request, session: Session, model_id: str, *, error: str | None = None) -> Response:
    """The model's row after an action (htmx), or back to the page (a plain form)."""
    if not wants_fragment(request):
        if error:
            return _page(request, session, error=error)
        return RedirectResponse("/models", status_code=303)
    model = local_model(session, model_id)
    if model is None:
        return HTMLResponse("", status_code=200)
    return templates.TemplateResponse(
        request, "partials/model_row.html", {"model": model, "probes": get_probe_jobs(), "error": error}
    )


def _missing(model_id: str) -> str:
    return f"There is no model {model_id!r}; the models page lists them."


@router.get("", response_class=HTMLResponse)
def models_page(
    request: Request,
    session: SessionDep,
    q: Annotated[str | None, Query(max_length=200)] = None,
    sort: SearchSort = "downloads",
    author: Annotated[str, Query(max_length=96)] = DEFAULT_AUTHOR,
    model_type: SearchType = "",
) -> HTMLResponse:
    """The page; with `q` (the search form without JavaScript) it includes the hub results."""
    found = (
        search_results(session, query=q, sort=sort, author=author, model_type=model_type)
        if q is not None
        else None
    )
    hub = found[0] if found else None
    return _page(request, session, hub=hub)


def _gguf_path(path: str) -> Path:
    try:
        return Path(path.strip()).expanduser()
    except RuntimeError:  # "~name" of a user this machine does not have
        return Path(path.strip())


def _is_file(path: Path) -> bool:
    """Whether a file is there; False also for a name no file can have (a part over the file
    system's 255 bytes), which `Path.is_file` raises for."""
    try:
        return path.is_file()
    except (OSError, ValueError):
        return False


@router.get("/import/inspect", response_class=HTMLResponse)
async def inspect_import(
    request: Request,
    session: SessionDep,
    path: Annotated[str, Query(max_length=4096)] = "",
    quantization: Annotated[GGUFQuantization, Query()] = "auto",
) -> HTMLResponse:
    """What the GGUF file holds and what importing it stores (htmx: the plan alone)."""
    gguf = _gguf_path(path)
    plan = GGUFPlan(path=str(gguf) if path.strip() else "")
    if not path.strip():
        plan.error = "Give the full path of a .gguf file to inspect."
    elif not _is_file(gguf):
        plan.error = f"No file at {gguf}; give the full path of a .gguf file."
    else:
        try:
            plan.info = await asyncio.to_thread(inspect_gguf, gguf, quantization)
        except GGUFImportError as exc:
            plan.error = str(exc)
    if wants_fragment(request):
        return templates.TemplateResponse(request, "partials/gguf_plan.html", {"plan": plan})
    return _page(request, session, plan=plan)


@router.post("/import", response_class=HTMLResponse)
async def import_model(
    request: Request,
    session: SessionDep,
    path: Annotated[str, Form()],
    model_id: Annotated[str, Form()] = "",
    quantization: Annotated[GGUFQuantization, Form()] = "auto",
) -> Response:
    gguf = _gguf_path(path)
    if not _is_file(gguf):
        return _page(request, session, error=f"No file at {gguf}; give the full path of a .gguf file.")
    models_dir = get_server_settings().models_dir

    def run() -> str:
        return import_gguf(session, gguf, models_dir, model_id.strip() or None, quantization=quantization).id

    try:
        imported = await asyncio.to_thread(run)
    except (ModelStoreError, GGUFImportError) as exc:
        return _page(request, session, error=str(exc))
    return _page(request, session, message=f"Imported {imported}.")


@router.post("/add", response_class=HTMLResponse)
async def add_from_disk(
    request: Request,
    session: SessionDep,
    path: Annotated[str, Form(max_length=4096)],
    model_id: Annotated[str, Form(max_length=255)] = "",
    copy_files: Annotated[str, Form(alias="copy", max_length=8)] = "",
) -> Response:
    """Register a model directory where it is (or copied, with the box ticked) or convert a GGUF
    file, then probe it in the background."""
    try:
        record = await add_model_from_disk(
            session, path.strip(), model_id.strip() or None, copy=bool(copy_files)
        )
    except APIError as exc:
        return _page(request, session, error=exc.message, status=exc.status)
    return _page(request, session, message=f"Added {record.id} ({added_how(record)}); probing it now.")


@router.post("/{model_id:path}/load", response_class=HTMLResponse)
@router.post("/{model_id:path}/pin", response_class=HTMLResponse)
@router.post("/{model_id:path}/unpin", response_class=HTMLResponse)
@router.post("/{model_id:path}/unload", response_class=HTMLResponse)
async def pool_action(request: Request, session: SessionDep, model_id: str) -> Response:
    """load; pin (load now and keep loaded: exempt from eviction and the idle TTL); unpin; unload."""
    action = request.url.path.rsplit("/", 1)[1]
    if get_model(session, model_id) is None:
        return _page(request, session, error=_missing(model_id), status=404)
    try:
        if action in ("load", "pin"):
            await load_model(model_id, pin=action == "pin")
        elif action == "unpin":
            set_pinned(session, model_id, False)
        else:
            await unload_model(session, model_id)
    except APIError as exc:
        return _row(request, session, model_id, error=exc.message)
    return _row(request, session, model_id)


@router.post("/{model_id:path}/probe", response_class=HTMLResponse)
async def probe(request: Request, session: SessionDep, model_id: str) -> Response:
    if get_model(session, model_id) is None:
        return _page(request, session, error=_missing(model_id), status=404)
    start_probe(model_id)
    if not wants_fragment(request):
        return RedirectResponse(f"/models/{model_id}", status_code=303)
    return _row(request, session, model_id)


@router.post("/{model_id:path}/delete", response_class=HTMLResponse)
def delete(request: Request, session: SessionDep, model_id: str) -> Response:
    try:
        done = delete_model(session, model_id)
    except ModelStoreError as exc:
        return _row(request, session, model_id, error=str(exc))
    if wants_fragment(request):
        return HTMLResponse("")  # the row goes away
    return _page(request, session, message=done)


@router.get("/{model_id:path}/delete", response_class=HTMLResponse)
def confirm_delete(request: Request, session: SessionDep, model_id: str) -> HTMLResponse:
    """The confirmation a plain form gets (htmx asks with hx-confirm instead)."""
    model = local_model(session, model_id)
    if model is None:
        return _page(request, session, error=_missing(model_id), status=404)
    return render(request, "model_delete.html", model=model)


@router.get("/{model_id:path}/probe/events")
async def probe_events(request: Request, session: SessionDep, model_id: str) -> Response:
    """The probe panel, re-rendered on every step; a `done` event when the probe ends."""
    if get_model(session, model_id) is None:
        return _page(request, session, error=_missing(model_id), status=404)
    session.close()  # the stream may last minutes: hold no read transaction meanwhile
    job = get_probe_jobs().get(model_id)

    def panel(current: ProbeJob | None) -> str:
        return templates.get_template("partials/probe_steps.html").render(job=current)

    async def events() -> AsyncIterator[ServerSentEvent]:
        yield ServerSentEvent(event="probe", data=panel(job))
        while job is not None and not job.finished and not await request.is_disconnected():
            await job.changed(PROBE_EVENT_SECONDS)
            yield ServerSentEvent(event="probe", data=panel(job))
        yield ServerSentEvent(event="done", data=panel(job))

    return EventSourceResponse(events(), ping=PROBE_EVENT_SECONDS)


def _detail(
    request: Request,
    session: Session,
    model: LocalModel,
    *,
    status: int = 200,
    partial: str = "partials/model_options.html",
    **context: Any,
) -> HTMLResponse:
    """The model page, or one of its sections for htmx; text models have generation options."""
    view = options_view(session, model.id) if model.model_type == "text-gen" else None
    context.setdefault("defaults_inputs", defaults_inputs(model_defaults(session, model.id)))
    return render(
        request,
        "model_detail.html",
        partial,
        status_code=status,
        model=model,
        job=get_probe_jobs().get(model.id),
        view=view,
        # LoRA adapters over a text model (routers/lora_adapters.py).
        adapters=adapter_views(session, model.id) if model.model_type == "text-gen" else None,
        base_model=model.id,
        **context,
    )


@router.post("/{model_id:path}/options", response_class=HTMLResponse)
async def save_options(
    request: Request,
    session: SessionDep,
    model_id: str,
    draft_model: Annotated[str, Form(max_length=255)] = "",
    kv_bits: Annotated[str, Form(max_length=8)] = "",
    kv_group_size: Annotated[str, Form(max_length=8)] = "",
) -> Response:
    """The draft model and KV cache quantization (a loaded model reloads with them)."""
    model = local_model(session, model_id)
    if model is None:
        return _page(request, session, error=_missing(model_id), status=404)
    try:
        fields = {"draft_model": draft_model, "kv_bits": kv_bits, "kv_group_size": kv_group_size}
        message = await save_options_form(session, model_id, **fields)
    except (APIError, ValueError) as exc:
        return _detail(request, session, model, status=400, error=getattr(exc, "message", str(exc)))
    if not wants_fragment(request):
        return RedirectResponse(f"/models/{model_id}", status_code=303)
    return _detail(request, session, local_model(session, model_id) or model, message=message)


@router.post("/{model_id:path}/defaults", response_class=HTMLResponse)
async def save_defaults(request: Request, session: SessionDep, model_id: str) -> Response:
    """What the model runs with when a request leaves it out (applies from the next request)."""
    model = local_model(session, model_id)
    if model is None:
        return _page(request, session, error=_missing(model_id), status=404)
    form = {key: value for key, value in (await request.form()).items() if isinstance(value, str)}
    partial = "partials/model_defaults.html"
    try:
        save_defaults_form(session, model_id, form)
    except (ModelDefaultsError, APIError) as exc:
        inputs = {key: form.get(key, "") for key in FIELDS}
        error = getattr(exc, "message", str(exc))
        return _detail(
            request, session, model, status=400, partial=partial, defaults_error=error, defaults_inputs=inputs
        )
    if not wants_fragment(request):
        return RedirectResponse(f"/models/{model_id}", status_code=303)
    return _detail(
        request, session, model, partial=partial, defaults_message="Saved; they apply from the next request."
    )


@router.get("/{model_id:path}", response_class=HTMLResponse)
def model_detail(request: Request, session: SessionDep, model_id: str) -> HTMLResponse:
    """What the probe found (or is finding) for one model; re-probe, set options and benchmark
    it from here."""
    model = local_model(session, model_id)
    if model is None:
        return _page(request, session, error=_missing(model_id), status=404)
    return _detail(
        request,
        session,
        model,
        bench_job=get_benchmark_jobs().get(model.id),
        benchmark_runs=benchmark_rows(session, model.id),
        sizes=RUN_SIZES,
    )
