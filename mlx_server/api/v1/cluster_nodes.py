"""Admin endpoints of a cluster (thin: parse, dispatch to mlx_server/distributed): this node's
report (GET /v1/admin/node, what a coordinator asks another machine first) and the nodes this
server knows (GET/POST /v1/admin/cluster/nodes, DELETE /v1/admin/cluster/nodes/{name}).
A node's API key is accepted, stored and sent, never returned."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request

from mlx_server.database import SessionDep
from mlx_server.distributed.node_info import NodeReport, node_report
from mlx_server.distributed.nodes import NodeIn, NodeView, add_node, node_views, remove_node

router = APIRouter(prefix="/admin", tags=["admin"])


@router.get("/node")
def this_node(request: Request, session: SessionDep) -> NodeReport:
    """This machine: memory, MLX versions, distributed backends, models (with config hashes)."""
    return node_report(session, f"{request.url.scheme}://{request.url.netloc}")


@router.get("/cluster/nodes")
async def nodes(session: SessionDep) -> dict[str, Any]:
    """The nodes, each with its live report or why it has none (asked at once, time-bounded)."""
    return {"object": "list", "data": await node_views(session)}


@router.post("/cluster/nodes")
async def add(body: NodeIn, session: SessionDep) -> NodeView:
    """Add a node (or give a known one a new key): refused unless it answers with its report."""
    return await add_node(session, body)


@router.delete("/cluster/nodes/{name}")
def remove(name: str, session: SessionDep) -> dict[str, Any]:
    remove_node(session, name)
    return {"deleted": name}
