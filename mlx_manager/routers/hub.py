"""Hub search for the models page: results with size, quantization and a memory fit estimate."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse

from mlx_manager.deps import SessionDep
from mlx_manager.services.hub import DEFAULT_AUTHOR, SearchSort, SearchType, search_results
from mlx_manager.web.templating import templates

router = APIRouter(prefix="/hub")


@router.get("/search", response_class=HTMLResponse)
def hub_search(
    request: Request,
    session: SessionDep,
    q: Annotated[str, Query(max_length=200)] = "",
    sort: SearchSort = "downloads",
    author: Annotated[str, Query(max_length=96)] = DEFAULT_AUTHOR,
    model_type: SearchType = "",
) -> HTMLResponse:
    """partials/hub_results.html; the hub's failure is 502 (or its status) with the reason."""
    context, status_code = search_results(session, query=q, sort=sort, author=author, model_type=model_type)
    return templates.TemplateResponse(request, "partials/hub_results.html", context, status_code=status_code)
