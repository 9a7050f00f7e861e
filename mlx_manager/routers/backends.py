"""The Backends page: remote backends (add or change, refresh their models, delete), their
circuit breakers' states, and the routing rules that send models to them.

A backend's API key is written once and never shown back: the page shows it masked.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Form
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from pydantic import ValidationError

from mlx_manager.deps import SQLITE_MAX_INT, Page, PageDep
from mlx_manager.services.settings_store import mask_secret
from mlx_manager.web.refusals import refusal_message
from mlx_manager.web.templating import render
from mlx_server.facade import (
    APIError,
    BackendIn,
    RuleIn,
    backend_view,
    delete_backend,
    delete_rule,
    list_backends,
    list_rules,
    refresh_backend_models,
    save_backend,
    save_rule,
)

router = APIRouter(prefix="/backends")


def _page(page: Page, *, error: str | None = None, message: str | None = None) -> HTMLResponse:
    backends = [
        (backend_view(b), mask_secret(b.api_key) if b.api_key else "none")
        for b in list_backends(page.session)
    ]
    return render(
        page.request,
        "backends.html",
        backends=backends,
        rules=list_rules(page.session),
        error=error,
        message=message or page.request.query_params.get("message"),
        status_code=400 if error else 200,
    )


def _done(message: str) -> Response:
    return RedirectResponse(f"/backends?message={message}", status_code=303)


@router.get("", response_class=HTMLResponse)
def backends_page(page: PageDep) -> HTMLResponse:
    return _page(page)


@router.post("", response_class=HTMLResponse)
async def save(
    page: PageDep,
    name: Annotated[str, Form()],
    kind: Annotated[str, Form()],
    base_url: Annotated[str, Form()],
    api_key: Annotated[str, Form()] = "",
    connect_timeout_s: Annotated[float, Form()] = 5.0,
    read_timeout_s: Annotated[float, Form()] = 120.0,
) -> Response:
    """Add or change a backend (a blank key keeps the stored one), then ask it for its models."""
    fields = {"name": name, "kind": kind, "base_url": base_url}
    timeouts = {"connect_timeout_s": connect_timeout_s, "read_timeout_s": read_timeout_s}
    try:
        given = BackendIn.model_validate(fields | timeouts | ({"api_key": api_key} if api_key else {}))
        await save_backend(page.session, given)
        await refresh_backend_models(page.session, given.name)
    except (ValidationError, APIError) as exc:
        return _page(page, error=refusal_message(exc))
    return _done(f"Backend {name} saved.")


@router.post("/refresh", response_class=HTMLResponse)
async def refresh(page: PageDep, name: Annotated[str, Form()]) -> Response:
    try:
        await refresh_backend_models(page.session, name)
    except APIError as exc:
        return _page(page, error=exc.message)
    return _done(f"Models of {name} refreshed.")


@router.post("/delete", response_class=HTMLResponse)
def delete(page: PageDep, name: Annotated[str, Form()]) -> Response:
    try:
        delete_backend(page.session, name)
    except APIError as exc:
        return _page(page, error=exc.message)
    return _done(f"Backend {name} deleted.")


@router.post("/rules", response_class=HTMLResponse)
def add_rule(
    page: PageDep,
    pattern: Annotated[str, Form()],
    targets: Annotated[str, Form()],
    position: Annotated[int, Form()] = 0,
) -> Response:
    """A rule from "backend:model, model" text: a target with a colon is a backend's model."""
    parsed = [
        {"backend": b.strip(), "model": m.strip()} if m else {"model": b.strip()}
        for b, _, m in (t.strip().partition(":") for t in targets.split(",") if t.strip())
    ]
    try:
        save_rule(
            page.session, RuleIn.model_validate({"pattern": pattern, "targets": parsed, "position": position})
        )
    except (ValidationError, APIError) as exc:
        return _page(page, error=refusal_message(exc))
    return _done(f"Rule {pattern} saved.")


@router.post("/rules/delete", response_class=HTMLResponse)
def remove_rule(page: PageDep, rule_id: Annotated[int, Form(ge=1, le=SQLITE_MAX_INT)]) -> Response:
    try:
        delete_rule(page.session, rule_id)
    except APIError as exc:
        return _page(page, error=exc.message)
    return _done("Rule deleted.")
