"""LoRA adapters on the model page: register one over a text model, remove one. Each POST
answers with the page's adapters section for htmx, or redirects back to the model page."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Form, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from sqlmodel import Session

from mlx_manager.deps import SessionDep
from mlx_manager.web.templating import render, wants_fragment
from mlx_server.facade import APIError, adapter_views, register_adapter, remove_adapter

router = APIRouter(prefix="/lora-adapters")


def _section(
    request: Request,
    session: Session,
    base_model: str,
    *,
    status: int = 200,
    message: str | None = None,
    error: str | None = None,
) -> HTMLResponse:
    return render(
        request,
        "partials/model_lora.html",
        status_code=status,
        base_model=base_model,
        adapters=adapter_views(session, base_model),
        lora_message=message,
        lora_error=error,
    )


def _done(request: Request, session: Session, base_model: str, message: str) -> Response:
    if not wants_fragment(request):
        return RedirectResponse(f"/models/{base_model}", status_code=303)
    return _section(request, session, base_model, message=message)


@router.post("", response_class=HTMLResponse)
async def create(
    request: Request,
    session: SessionDep,
    base_model: Annotated[str, Form(max_length=255)],
    name: Annotated[str, Form(max_length=64)],
    path: Annotated[str, Form(max_length=4096)],
) -> Response:
    """Register the adapter directory over `base_model` (checked against it first)."""
    try:
        adapter = await register_adapter(session, base_model, name.strip(), path.strip())
    except APIError as exc:
        return _section(request, session, base_model, status=exc.status, error=exc.message)
    return _done(request, session, base_model, f"Registered {adapter.id}: requests name it as their model.")


@router.post("/{adapter_id:path}/delete", response_class=HTMLResponse)
async def delete(request: Request, session: SessionDep, adapter_id: str) -> Response:
    """Unload (refused while it serves requests) and forget the adapter; its files stay."""
    base_model = adapter_id.rpartition("+")[0]
    try:
        await remove_adapter(session, adapter_id)
    except APIError as exc:
        return _section(request, session, base_model, status=exc.status, error=exc.message)
    return _done(request, session, base_model, f"Removed {adapter_id}.")
