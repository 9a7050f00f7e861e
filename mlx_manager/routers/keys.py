"""The Keys page: create an API key (shown once), list keys by prefix, revoke one.

A created key is shown in the page answering the POST, never stored or shown again (no
redirect, so a reload cannot show it either). Revoking redirects back to the list.
"""

from __future__ import annotations

from typing import Annotated, Any
from urllib.parse import urlencode

from fastapi import APIRouter, Form
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from mlx_manager.deps import Page, PageDep
from mlx_manager.services.forms import FormError
from mlx_manager.web.templating import render
from mlx_server.facade import (
    ApiKeyError,
    ApiKeyScope,
    NewApiKey,
    create_api_key,
    key_state,
    keys_exist,
    list_api_keys,
    revoke_api_key,
)

router = APIRouter(prefix="/keys")
NO_INPUTS = {
    "name": "",
    "scope": "inference",
    "expires_in_days": "",
    "requests_per_minute": "",
    "tokens_per_day": "",
}


def _page(
    page: Page,
    *,
    created: NewApiKey | None = None,
    error: str | None = None,
    inputs: dict[str, str] | None = None,
) -> HTMLResponse:
    revoked = page.request.query_params.get("revoked")
    return render(
        page.request,
        "keys.html",
        keys=[(key, key_state(key).value) for key in list_api_keys(page.session)],
        required=keys_exist(page.session) or not page.settings.binds_loopback_only,
        created=created,
        error=error,
        status_code=400 if error else 200,
        message=f"Key {revoked!r} revoked." if revoked else None,
        inputs=inputs or NO_INPUTS,
    )


def _number(inputs: dict[str, str], field: str, kind: type[int] | type[float], label: str) -> Any:
    text = inputs[field].strip()
    if not text:
        return None
    try:
        return kind(text)
    except ValueError as exc:
        raise FormError(f"{label} must be a number (or empty).") from exc


@router.get("", response_class=HTMLResponse)
def keys_page(page: PageDep) -> HTMLResponse:
    return _page(page)


@router.post("", response_class=HTMLResponse)
def create_key(
    page: PageDep,
    name: Annotated[str, Form()],
    scope: Annotated[str, Form()] = "inference",
    expires_in_days: Annotated[str, Form()] = "",
    requests_per_minute: Annotated[str, Form()] = "",
    tokens_per_day: Annotated[str, Form()] = "",
) -> HTMLResponse:
    inputs = {
        "name": name,
        "scope": scope,
        "expires_in_days": expires_in_days,
        "requests_per_minute": requests_per_minute,
        "tokens_per_day": tokens_per_day,
    }
    try:
        if scope not in {member.value for member in ApiKeyScope}:
            raise FormError("Scope must be inference or admin.")
        created = create_api_key(
            page.session,
            name=name,
            scope=ApiKeyScope(scope),
            expires_in_days=_number(inputs, "expires_in_days", float, "Expiry"),
            requests_per_minute=_number(inputs, "requests_per_minute", int, "Requests per minute"),
            tokens_per_day=_number(inputs, "tokens_per_day", int, "Tokens per day"),
        )
    except (FormError, ApiKeyError) as exc:
        return _page(page, error=str(exc), inputs=inputs)
    return _page(page, created=created)


@router.post("/revoke", response_class=HTMLResponse)
def revoke_key(page: PageDep, name: Annotated[str, Form()]) -> Response:
    try:
        revoked = revoke_api_key(page.session, name)
    except ApiKeyError as exc:
        return _page(page, error=str(exc))
    return RedirectResponse(f"/keys?{urlencode({'revoked': revoked.name})}", status_code=303)
