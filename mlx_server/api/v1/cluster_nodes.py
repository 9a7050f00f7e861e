"""Admin endpoints of a cluster (thin: parse, dispatch to mlx_server/distributed): this node's
report (GET /v1/admin/node, what a coordinator asks another machine first) and the nodes this
server knows (GET/POST /v1/admin/cluster/nodes, DELETE /v1/admin/cluster/nodes/{name}), and
the ranks this machine runs for a coordinator (/v1/admin/node/ranks: reserve, start, state,
stop; node_ranks.py). A node's API key is accepted, stored and sent, never returned."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Request
from pydantic import BaseModel, ConfigDict, Field

from mlx_server.database import SessionDep
from mlx_server.distributed.node_info import NodeReport, node_report
from mlx_server.distributed.node_ranks import rank_state, reserve_rank, start_rank, stop_rank
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


class RankIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    model: str = Field(min_length=1, max_length=255, description="The model's id on this node")
    config_sha256: str = Field(pattern=r"^[0-9a-f]{64}$", description="The coordinator's config.json hash")
    strategy: Literal["tensor", "pipeline"]
    rank: int = Field(ge=1, lt=64)
    backend: Literal["ring"] = "ring"


class HostfileIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    hostfile: list[list[Annotated[str, Field(max_length=64)]]] = Field(
        min_length=2, max_length=64, description='Per rank: ["ip:port"]'
    )


@router.post("/node/ranks")
def reserve(body: RankIn, request: Request) -> dict[str, Any]:
    """Reserve a rank of a model this node has (a port on the address the caller reached)."""
    host = request.scope["server"][0] if request.scope.get("server") else "127.0.0.1"
    return reserve_rank(body.model, body.config_sha256, body.strategy, body.rank, body.backend, host)


@router.post("/node/ranks/{rank_id}/start")
def start(rank_id: str, body: HostfileIn) -> dict[str, Any]:
    return start_rank(rank_id, body.hostfile)


@router.get("/node/ranks/{rank_id}")
def state(rank_id: str) -> dict[str, Any]:
    return rank_state(rank_id)


@router.delete("/node/ranks/{rank_id}")
def stop(rank_id: str) -> dict[str, Any]:
    return stop_rank(rank_id)
