"""Hub search for the models page: results with size, quantization and a memory fit estimate."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse
from sqlmodel import Session

from mlx_manager.services.hub import (
    DEFAULT_AUTHOR,
    DEFAULT_CONTEXT_TOKENS,
    HubError,
    SearchSort,
    load_hub_config,
    search_models,
)
from mlx_manager.web.templating import templates
from mlx_server.database import SessionDep
from mlx_server.models.pool import get_model_pool

router = APIRouter(prefix="/hub")


@router.get("/search", response_class=HTMLResponse)
def hub_search(
    request: Request,
    session: SessionDep,
    q: Annotated[str, Query(max_length=200)] = "",
    sort: SearchSort = "downloads",
    author: Annotated[str, Query(max_length=96)] = DEFAULT_AUTHOR,
) -> HTMLResponse:
    """partials/hub_results.html; the hub's failure is 502 (or its status) with the reason."""
    context, status_code = search_results(session, query=q, sort=sort, author=author)
    return templates.TemplateResponse(request, "partials/hub_results.html", context, status_code=status_code)


def search_results(
    session: Session, *, query: str, sort: SearchSort, author: str
) -> tuple[dict[str, Any], int]:
    """What hub_results.html shows, and the status code: the hub's failure is 502 (or its
    status) with the reason."""
    budget = get_model_pool().budget_bytes
    context: dict[str, Any] = {"query": query, "sort": sort, "author": author, "budget_bytes": budget}
    context["context_tokens"] = DEFAULT_CONTEXT_TOKENS
    try:
        config = load_hub_config(session)
        context["results"] = search_models(config, query=query, author=author, sort=sort, budget_bytes=budget)
    except HubError as exc:
        context["error"] = exc.message
        return context, exc.status_code
    return context, 200
