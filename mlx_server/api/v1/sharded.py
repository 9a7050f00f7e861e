"""/v1/admin/sharded: one model served by a group of ranks (thin: parse, dispatch to
mlx_server/distributed/service.py). The plan says how a model would split and what each rank
holds, or why it cannot (409 with the reasons)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter
from pydantic import BaseModel, ConfigDict, Field

from mlx_server.distributed.service import (
    MAX_RANKS,
    plan_sharding,
    refusal,
    restart_sharded,
    sharded_status,
    start_sharded,
    stop_sharded,
)

router = APIRouter(prefix="/admin/sharded", tags=["admin"])


class ShardedIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    model: str = Field(min_length=1, max_length=255, description="A text model's id")
    ranks: int = Field(default=2, ge=2, le=MAX_RANKS, description="How many ranks (on this machine)")
    strategy: Literal["auto", "tensor", "pipeline"] = "auto"
    nodes: list[Annotated[str, Field(min_length=1, max_length=64)]] | None = Field(
        default=None,
        max_length=MAX_RANKS - 1,
        description="Registered nodes, one per rank after rank 0 (this machine); `ranks` is then ignored",
    )


@router.post("/plan")
async def plan(body: ShardedIn) -> dict[str, Any]:
    """The split and each rank's memory; a split that cannot work is a 409 with its reasons."""
    found = await plan_sharding(body.model, body.ranks, body.strategy, body.nodes)
    if not found.ok:
        raise refusal(found)
    return found.as_dict()


@router.post("")
async def start(body: ShardedIn) -> dict[str, Any]:
    return (await start_sharded(body.model, body.ranks, body.strategy, body.nodes)).as_dict()


@router.get("")
def status() -> dict[str, Any]:
    return {"object": "list", "data": [s.as_dict() for s in sharded_status()]}


@router.post("/{model_id:path}/restart")
async def restart(model_id: str) -> dict[str, Any]:
    return (await restart_sharded(model_id)).as_dict()


@router.delete("/{model_id:path}")
async def stop(model_id: str) -> dict[str, Any]:
    return (await stop_sharded(model_id)).as_dict()
