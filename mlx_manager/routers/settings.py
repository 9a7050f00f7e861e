"""The Settings page: pool limits, audit retention, hub, generation defaults, the environment.

Each section is its own form posting to /settings/{section}: saved values take effect at once
(through the services that own them); a plain form is redirected back (post/redirect/get), htmx
gets the section again; a refused form is 400 with the section showing the message and the input.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Annotated, Any

from fastapi import APIRouter, Form, status
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from mlx_manager.deps import Page, PageDep
from mlx_manager.services import settings_forms as forms
from mlx_manager.services.forms import FormError
from mlx_manager.web.templating import render, wants_fragment
from mlx_server.facade import MAX_RETENTION_DAYS, audit_retention, audit_service, set_audit_retention

router = APIRouter(prefix="/settings")

# A section's form: what it shows again when refused.
Form_ = forms.PoolForm | forms.HubForm | forms.GenerationForm

PARTIALS = {
    "pool": "partials/settings_pool.html",
    "audit": "partials/audit_retention.html",  # the audit page's form, posting here
    "hub": "partials/settings_hub.html",
    "generation": "partials/settings_generation.html",
}


def _context(page: Page) -> dict[str, Any]:
    session, settings = page.session, page.settings
    return {
        "bind_warning": not settings.binds_loopback_only,
        "host": settings.host,
        "environment": forms.environment_rows(settings),
        "pool": forms.pool_section(session),
        "hub": forms.hub_section(session),
        "generation": forms.generation_section(session),
        # The audit retention partial's names (shared with the audit page).
        "retention": audit_retention(session),
        "max_retention_days": MAX_RETENTION_DAYS,
        "retention_action": "/settings/audit",
    }


def _section(
    page: Page,
    section: str,
    *,
    message: str | None = None,
    error: str | None = None,
    shown: dict[str, Any] | None = None,
    **extra: Any,
) -> Response:
    """A saved section: redirect a plain form, re-render for htmx; a refused one: 400 with the
    section showing the error and the user's input (`shown`)."""
    if error is None and not wants_fragment(page.request):
        return RedirectResponse(f"/settings?saved={section}#{section}", status_code=status.HTTP_303_SEE_OTHER)
    context = {**_context(page), **extra}
    if section != "audit":  # the audit partial reads its own names (extra)
        context[section].update(message=message, error=error)
        if shown is not None:
            context[section]["inputs"] = shown
    response = render(page.request, "settings.html", PARTIALS[section], **context)
    if error is not None:
        response.status_code = status.HTTP_400_BAD_REQUEST
    return response


def _saved(page: Page, section: str, form: Form_, save: Callable[[], str]) -> Response:
    """Save one section's form (`save` returns the message); a refused form shows its input again."""
    try:
        message = save()
    except FormError as exc:
        return _section(page, section, error=str(exc), shown=form.shown())
    return _section(page, section, message=message)


@router.get("", response_class=HTMLResponse)
def settings_page(page: PageDep, saved: str = "") -> HTMLResponse:
    """Reads only; `saved` (after a plain form's redirect) says which section was saved."""
    context = _context(page)
    if saved in ("pool", "hub", "generation"):
        context[saved]["message"] = "Saved."
    context.update(saved=saved == "audit", pruned=None)
    return render(page.request, "settings.html", **context)


@router.post("/pool", response_class=HTMLResponse)
def save_pool(page: PageDep, form: Annotated[forms.PoolForm, Form()]) -> Response:
    """Same limits, same service as the Server page: stored and applied to the pool at once."""
    return _saved(page, "pool", form, partial(forms.save_pool, page.session, form))


@router.post("/audit", response_class=HTMLResponse)
def save_audit_retention(
    page: PageDep, days: Annotated[str, Form()] = "", reset: Annotated[str, Form()] = ""
) -> Response:
    """Override MLX_SERVER_AUDIT_RETENTION_DAYS (or drop the override); prunes right away."""
    try:
        set_audit_retention(page.session, None if reset else int(days))
    except ValueError:
        error = f'Keep audit rows for a whole number of days from 1 to {MAX_RETENTION_DAYS}, not "{days}".'
        return _section(page, "audit", error=error, retention_error=error, retention_input=days)
    pruned = audit_service.prune_expired()
    return _section(page, "audit", saved=True, pruned=pruned)


@router.post("/hub", response_class=HTMLResponse)
def save_hub(page: PageDep, form: Annotated[forms.HubForm, Form()]) -> Response:
    """Endpoint, cache and auto-probe; the token only when typed (empty keeps it), or cleared."""
    return _saved(page, "hub", form, partial(forms.save_hub, page.session, form))


@router.post("/generation", response_class=HTMLResponse)
def save_generation(page: PageDep, form: Annotated[forms.GenerationForm, Form()]) -> Response:
    """The playground's defaults for new conversations and the API's max_tokens default."""
    return _saved(page, "generation", form, partial(forms.save_generation, page.session, form))
