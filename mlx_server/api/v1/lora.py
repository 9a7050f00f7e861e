"""LoRA adapters under /v1/admin/lora-adapters (thin: parse, dispatch to services)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from pydantic import BaseModel, ConfigDict, Field

from mlx_server.database import SessionDep
from mlx_server.schemas.limits import MAX_MODEL_NAME_CHARS, TextOnly
from mlx_server.services.operations.lora_adapters import (
    AdapterView,
    adapter_views,
    register_adapter,
    remove_adapter,
)

router = APIRouter(prefix="/admin/lora-adapters", tags=["admin"])


class AdapterIn(TextOnly):
    model_config = ConfigDict(extra="forbid")

    base_model: str = Field(
        max_length=MAX_MODEL_NAME_CHARS, description="The local text model the adapter was trained on"
    )
    name: str = Field(max_length=64, description="Requests name the adapter '<base_model>+<name>'")
    path: str = Field(
        max_length=4096, description="A directory on the server: adapter_config.json + adapters.safetensors"
    )


class AdapterList(BaseModel):
    object: str = "list"
    data: list[AdapterView]


@router.get("")
def list_lora_adapters(session: SessionDep, base_model: str | None = None) -> AdapterList:
    """Registered adapters (all, or over `base_model`) and whether each is loaded."""
    return AdapterList(data=adapter_views(session, base_model))


@router.post("", status_code=201)
async def create_lora_adapter(session: SessionDep, body: AdapterIn) -> AdapterView:
    """Register an mlx-lm adapter directory over a base model; 400 when it does not fit it."""
    return await register_adapter(session, body.base_model, body.name, body.path)


@router.delete("/{model_id:path}")
async def delete_lora_adapter(session: SessionDep, model_id: str) -> dict[str, Any]:
    """Unload (409 while it serves requests) and forget an adapter; its files stay."""
    return await remove_adapter(session, model_id)
