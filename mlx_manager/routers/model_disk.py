"""Models already on this machine: what discovery finds (one click adds it), the folders it
searches, and conversions of Hugging Face checkpoints to MLX (started, followed, cancelled).

Included before routers/models.py, whose `/models/{id}` would otherwise take these paths.
"""

from __future__ import annotations

import asyncio
from html import escape
from typing import Annotated, Any

from fastapi import APIRouter, Form, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from sqlmodel import Session

from mlx_manager.deps import SessionDep
from mlx_manager.services.conversion_jobs import cancel_conversion, get_convert_jobs, start_conversion
from mlx_manager.services.local_models import added_how
from mlx_manager.services.model_discovery import model_folders, save_model_folders, scan_models
from mlx_manager.services.settings_store import SettingError
from mlx_manager.web.templating import render, templates, wants_fragment
from mlx_server.facade import CONVERT_BITS, CONVERT_GROUP_SIZES, APIError, add_model_from_disk

router = APIRouter(prefix="/models")

DISCOVERED = "partials/models_discovered.html"
CONVERSION = "partials/conversion_job.html"
CONVERT_FORM = "partials/model_convert_form.html"
ADDED = "partials/discovered_added.html"
CHOICES: dict[str, Any] = {"bits": CONVERT_BITS, "group_sizes": CONVERT_GROUP_SIZES}


def _discovered(request: Request, session: Session, *, status: int = 200, **context: object) -> HTMLResponse:
    """The section (htmx), or a page of its own (a plain link)."""
    context["found"] = scan_models(session)
    context["folders"] = "\n".join(str(folder) for folder in model_folders(session))
    return render(request, "models_discovered.html", DISCOVERED, status_code=status, **context)


@router.get("/discovered", response_class=HTMLResponse)
async def discovered(request: Request, session: SessionDep) -> HTMLResponse:
    """Models on this machine that are not registered (a walk of the disk: off the loop)."""
    return await asyncio.to_thread(_discovered, request, session)


@router.post("/folders", response_class=HTMLResponse)
def save_folders(
    request: Request, session: SessionDep, folders: Annotated[str, Form(max_length=20_000)] = ""
) -> HTMLResponse:
    """The extra folders discovery searches, one per line."""
    try:
        save_model_folders(session, folders)
    except SettingError as exc:
        return _discovered(request, session, status=400, error=str(exc))
    return _discovered(request, session, message="Folders saved.")


@router.post("/discovered/add", response_class=HTMLResponse)
async def add_found(
    request: Request,
    session: SessionDep,
    path: Annotated[str, Form(max_length=4096)],
    model_id: Annotated[str, Form(max_length=255)] = "",
) -> Response:
    """One click: register a found model where it is, then probe it; answers with its row."""
    try:
        record = await add_model_from_disk(session, path, model_id.strip() or None)
    except APIError as exc:
        refusal = {"error": exc.message, "path": path}
        return templates.TemplateResponse(request, ADDED, refusal, status_code=exc.status)
    if not wants_fragment(request):
        return RedirectResponse(f"/models/{record.id}", status_code=303)
    return templates.TemplateResponse(
        request, ADDED, {"record": record, "how": added_how(record), "path": path}
    )


@router.get("/convert", response_class=HTMLResponse)
def convert_form(request: Request, path: str = "", model_id: str = "") -> HTMLResponse:
    """The conversion form (prefilled from a discovered checkpoint's "Convert…")."""
    return render(request, "model_convert.html", path=path, model_id=model_id, **CHOICES)


@router.post("/convert", response_class=HTMLResponse)
async def start_convert(
    request: Request,
    session: SessionDep,
    path: Annotated[str, Form(max_length=4096)],
    bits: Annotated[int, Form()] = 4,
    group_size: Annotated[int, Form()] = 64,
    model_id: Annotated[str, Form(max_length=255)] = "",
) -> Response:
    """Check the checkpoint at once (a clear error for what cannot be converted), then convert
    in the background; the job's widget follows it."""
    try:
        job = start_conversion(session, path, bits=bits, group_size=group_size, model_id=model_id)
    except APIError as exc:
        shown = {"path": path, "model_id": model_id, "chosen_bits": bits, "chosen_group_size": group_size}
        refused = render(
            request,
            "model_convert.html",
            CONVERT_FORM,
            status_code=exc.status,
            error=exc.message,
            **shown,
            **CHOICES,
        )
        # The form's target is the conversions list; the refusal replaces the form instead.
        refused.headers.update({"HX-Retarget": "#model-convert", "HX-Reswap": "outerHTML"})
        return refused
    if not wants_fragment(request):
        return RedirectResponse("/models#conversions", status_code=303)
    return templates.TemplateResponse(request, CONVERSION, {"job": job}, status_code=202)


def _no_conversion(model_id: str) -> HTMLResponse:
    message = f"<p>No conversion into {escape(model_id)} in this run of the app.</p>"
    return HTMLResponse(message, status_code=404)


@router.get("/conversions/{model_id:path}", response_class=HTMLResponse)
def conversion(request: Request, model_id: str) -> Response:
    """A conversion's widget: progress while it runs (it polls itself), then how it ended."""
    job = get_convert_jobs().get(model_id)
    if job is None:
        return _no_conversion(model_id)
    return templates.TemplateResponse(request, CONVERSION, {"job": job})


@router.post("/conversions/{model_id:path}/cancel", response_class=HTMLResponse)
async def cancel(request: Request, model_id: str) -> Response:
    """Stop a running conversion: its process is killed and nothing of it is kept."""
    job = cancel_conversion(model_id)
    if job is not None:
        await job.ended_within(10)
    job = job or get_convert_jobs().get(model_id)
    if job is None:
        return _no_conversion(model_id)
    if not wants_fragment(request):
        return RedirectResponse("/models#conversions", status_code=303)
    return templates.TemplateResponse(request, CONVERSION, {"job": job})
