"""The Cluster page: this machine and the other machines (nodes) it can serve one model across,
each with its live report (memory, MLX version, distributed backends, models); add and remove
nodes. Reports are asked of every node at once, each within a few seconds: a node that went away
is shown as unreachable, and the page never waits longer (docs/DISTRIBUTED.md).

Below them the sharded models (state, the node a degraded one lost, restart, stop) and "Serve
across nodes": a model, its ranks on this machine (or the nodes that run one rank each after
rank 0 here) and a strategy give the plan first (each node's share against its budget, or why
it cannot work), and the plan's Start button starts it."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Form
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from pydantic import BaseModel, Field, ValidationError

from mlx_manager.deps import Page, PageDep
from mlx_manager.web.refusals import refusal_message
from mlx_manager.web.templating import render
from mlx_server.facade import APIError, cluster_nodes, list_models, node_report, sharded_service

router = APIRouter(prefix="/cluster")


ModelId = Annotated[str, Form(min_length=1, max_length=255)]


class ShardingForm(BaseModel):
    """The "Serve across nodes" form: what a plan is made of, and what its Start button sends again."""

    model: str = Field(min_length=1, max_length=255)
    ranks: int = Field(default=2, ge=2, le=sharded_service.MAX_RANKS)
    strategy: Literal["auto", "tensor", "pipeline"] = "auto"
    # Registered nodes, one rank on each after rank 0 (this machine); none: `ranks` on this machine.
    nodes: list[Annotated[str, Field(max_length=64)]] = Field(
        default_factory=list, max_length=sharded_service.MAX_RANKS - 1
    )

    def shown(self) -> dict[str, Any]:
        """The form's choices as the page shows them selected."""
        return {f"chosen_{name}": value for name, value in self.model_dump().items()}


async def _page(page: Page, *, error: str | None = None, **shown: Any) -> HTMLResponse:
    """`shown`: what a form asked for (a plan and the choices behind it)."""
    request = page.request
    return render(
        request,
        "cluster.html",
        "partials/cluster_nodes.html",
        this_node=node_report(page.session, f"{request.url.scheme}://{request.url.netloc}"),
        nodes=await cluster_nodes.node_views(page.session),
        sharded=sharded_service.sharded_status(),
        models=[m.id for m in list_models(page.session)],
        max_ranks=sharded_service.MAX_RANKS,
        error=error,
        message=request.query_params.get("message"),
        status_code=400 if error else 200,
        **shown,
    )


def _done(message: str) -> Response:
    return RedirectResponse(f"/cluster?message={message}", status_code=303)


@router.get("", response_class=HTMLResponse)
async def cluster_page(page: PageDep) -> HTMLResponse:
    return await _page(page)


@router.post("/nodes", response_class=HTMLResponse)
async def add_node(
    page: PageDep,
    host: Annotated[str, Form(max_length=512)],
    api_key: Annotated[str, Form(max_length=512)],
    name: Annotated[str, Form(max_length=64)] = "",
) -> Response:
    """Add a node: stored only once it has answered with its report, with this key."""
    try:
        given = cluster_nodes.NodeIn(url=host, api_key=api_key, name=name.strip() or None)
        added = await cluster_nodes.add_node(page.session, given)
    except (ValidationError, APIError) as exc:
        return await _page(page, error=refusal_message(exc))
    return _done(f"Node {added.name} added.")


@router.post("/nodes/remove", response_class=HTMLResponse)
async def remove_node(page: PageDep, name: Annotated[str, Form(max_length=64)]) -> Response:
    try:
        cluster_nodes.remove_node(page.session, name)
    except APIError as exc:
        return await _page(page, error=exc.message)
    return _done(f"Node {name} removed.")


@router.post("/sharded/plan", response_class=HTMLResponse)
async def plan(page: PageDep, form: Annotated[ShardingForm, Form()]) -> Response:
    """The plan, shown before anything starts: each node's share against its budget, or why not."""
    try:
        found = await sharded_service.plan_sharding(form.model, form.ranks, form.strategy, form.nodes or None)
    except APIError as exc:
        return await _page(page, error=exc.message, **form.shown())
    return await _page(page, plan=found, **form.shown())


@router.post("/sharded", response_class=HTMLResponse)
async def start(page: PageDep, form: Annotated[ShardingForm, Form()]) -> Response:
    """Start the planned model: its ranks form a group and the model is served from it."""
    try:
        started = await sharded_service.start_sharded(
            form.model, form.ranks, form.strategy, form.nodes or None
        )
    except APIError as exc:
        return await _page(page, error=exc.message)
    return _done(f"{started.model_id} is served by {started.ranks} ranks ({started.strategy} parallel).")


@router.post("/sharded/restart", response_class=HTMLResponse)
async def restart(page: PageDep, model: ModelId) -> Response:
    """A new group in place of the old one (a degraded model answers again)."""
    try:
        await sharded_service.restart_sharded(model)
    except APIError as exc:
        return await _page(page, error=exc.message)
    return _done(f"{model} restarted.")


@router.post("/sharded/stop", response_class=HTMLResponse)
async def stop(page: PageDep, model: ModelId) -> Response:
    try:
        await sharded_service.stop_sharded(model)
    except APIError as exc:
        return await _page(page, error=exc.message)
    return _done(f"{model} stopped; its ranks ended.")
