"""The MCP servers page (linked from Settings): register, edit and delete the servers whose tools
the playground's agent loop may call.

Each server's card loads its tools with htmx after the page (POST /settings/mcp/{id}/tools), so
a server that fails to start or hangs shows its error on its card, within the timeout, and
never holds the page. Listing starts a stdio server's command, so it is a POST: the CSRF
middleware's checks (this dashboard's token, not another site's or another origin's page:
an `<img>` on another port of 127.0.0.1 is same-site and carried the cookie to a GET). Saving
redirects back to the list (post/redirect/get); a refused form is 400 with the message and the
input, secrets blanked.
"""

from __future__ import annotations

from typing import Annotated
from urllib.parse import urlencode

from fastapi import APIRouter, Form
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from mlx_manager.config import get_manager_settings
from mlx_manager.deps import Page, PageDep, RowId
from mlx_manager.records import McpServer, McpTransport
from mlx_manager.services.forms import FormError
from mlx_manager.services.mcp_servers import (
    McpServerForm,
    delete_mcp_server,
    get_mcp_server,
    list_mcp_servers,
    save_mcp_server,
    view,
)
from mlx_manager.services.mcp_tools import McpUnavailable, list_server_tools
from mlx_manager.web.templating import render, templates

router = APIRouter(prefix="/settings/mcp")


def _page(
    page: Page,
    *,
    form: McpServerForm | None = None,
    editing: int | None = None,
    error: str | None = None,
) -> HTMLResponse:
    query = page.request.query_params
    done = {"saved": "saved", "deleted": "deleted"}
    message = next((f"MCP server {query[k]!r} {v}." for k, v in done.items() if query.get(k)), None)
    return render(
        page.request,
        "mcp.html",
        servers=[view(server) for server in list_mcp_servers(page.session)],
        form=form or McpServerForm(),
        editing=editing,
        error=error,
        message=message,
        timeout=get_manager_settings().mcp_timeout_seconds,
        status_code=400 if error else 200,
    )


def _saved(page: Page, server: McpServer, form: McpServerForm) -> Response:
    try:
        saved = save_mcp_server(page.session, server, form)
    except FormError as exc:
        return _page(page, form=form.shown(), editing=server.id, error=str(exc))
    return RedirectResponse(f"/settings/mcp?{urlencode({'saved': saved.name})}", status_code=303)


@router.get("", response_class=HTMLResponse)
def mcp_page(page: PageDep) -> HTMLResponse:
    return _page(page)


@router.post("", response_class=HTMLResponse)
def add_server(page: PageDep, form: Annotated[McpServerForm, Form()]) -> Response:
    return _saved(page, McpServer(name="", transport=McpTransport.STDIO), form)


@router.get("/{server_id}/edit", response_class=HTMLResponse)
def edit_page(page: PageDep, server_id: RowId) -> HTMLResponse:
    """The form filled with the server's settings; env and header values left blank (kept)."""
    try:
        server = get_mcp_server(page.session, server_id)
    except FormError as exc:
        return _page(page, error=str(exc))
    return _page(page, form=McpServerForm.of(server), editing=server_id)


@router.post("/{server_id}", response_class=HTMLResponse)
def edit_server(page: PageDep, server_id: RowId, form: Annotated[McpServerForm, Form()]) -> Response:
    try:
        server = get_mcp_server(page.session, server_id)
    except FormError as exc:
        return _page(page, form=form.shown(), error=str(exc))
    return _saved(page, server, form)


@router.post("/{server_id}/delete", response_class=HTMLResponse)
def delete_server(page: PageDep, server_id: RowId) -> Response:
    try:
        name = delete_mcp_server(page.session, server_id)
    except FormError as exc:
        return _page(page, error=str(exc))
    return RedirectResponse(f"/settings/mcp?{urlencode({'deleted': name})}", status_code=303)


@router.post("/{server_id}/tools", response_class=HTMLResponse)
async def server_tools(page: PageDep, server_id: RowId) -> HTMLResponse:
    """The card's tool list (start or connect, list, disconnect), or what went wrong, within the
    timeout."""
    timeout = get_manager_settings().mcp_timeout_seconds
    context: dict[str, object] = {"tools": [], "error": None}
    try:
        server = get_mcp_server(page.session, server_id)
        context["tools"] = await list_server_tools(server, timeout)
    except (FormError, McpUnavailable) as exc:
        context["error"] = str(exc)
    return templates.TemplateResponse(page.request, "partials/mcp_tools.html", context)
