"""The Cluster page: this machine and the other machines (nodes) it can serve one model across,
each with its live report (memory, MLX version, distributed backends, models); add and remove
nodes. Reports are asked of every node at once, each within a few seconds: a node that went away
is shown as unreachable, and the page never waits longer (docs/DISTRIBUTED.md)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Form
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from pydantic import ValidationError

from mlx_manager.deps import Page, PageDep
from mlx_manager.web.templating import render
from mlx_server.facade import APIError, cluster_nodes, node_report

router = APIRouter(prefix="/cluster")


async def _page(page: Page, *, error: str | None = None) -> HTMLResponse:
    request = page.request
    return render(
        request,
        "cluster.html",
        "partials/cluster_nodes.html",
        this_node=node_report(page.session, f"{request.url.scheme}://{request.url.netloc}"),
        nodes=await cluster_nodes.node_views(page.session),
        error=error,
        message=request.query_params.get("message"),
        status_code=400 if error else 200,
    )


def _refused(exc: ValidationError | APIError) -> str:
    if isinstance(exc, APIError):
        return exc.message
    first = exc.errors()[0]
    return f"{'.'.join(str(p) for p in first['loc'])}: {first['msg']}"


@router.get("", response_class=HTMLResponse)
async def cluster_page(page: PageDep) -> HTMLResponse:
    return await _page(page)


@router.post("/nodes", response_class=HTMLResponse)
async def add_node(
    page: PageDep,
    host: Annotated[str, Form()],
    api_key: Annotated[str, Form()],
    name: Annotated[str, Form()] = "",
) -> Response:
    """Add a node: stored only once it has answered with its report, with this key."""
    try:
        given = cluster_nodes.NodeIn(url=host, api_key=api_key, name=name.strip() or None)
        added = await cluster_nodes.add_node(page.session, given)
    except (ValidationError, APIError) as exc:
        return await _page(page, error=_refused(exc))
    return RedirectResponse(f"/cluster?message=Node {added.name} added.", status_code=303)


@router.post("/nodes/remove", response_class=HTMLResponse)
async def remove_node(page: PageDep, name: Annotated[str, Form()]) -> Response:
    try:
        cluster_nodes.remove_node(page.session, name)
    except APIError as exc:
        return await _page(page, error=exc.message)
    return RedirectResponse(f"/cluster?message=Node {name} removed.", status_code=303)
