"""/v1/admin/models: add a model from this machine's disk, and each model's defaults (thin:
parse, dispatch to services/operations)."""

from __future__ import annotations

from fastapi import APIRouter
from pydantic import BaseModel, ConfigDict, Field

from mlx_server.database import SessionDep
from mlx_server.models.defaults import ModelDefaults
from mlx_server.services.operations.model_defaults import (
    model_defaults,
    replace_model_defaults,
    update_model_defaults,
)
from mlx_server.services.operations.model_registration import add_model_from_disk

router = APIRouter(prefix="/admin/models", tags=["admin"])


class ModelAdd(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    path: str = Field(min_length=1, max_length=4096, description="A model directory or a .gguf file here")
    id: str | None = Field(default=None, max_length=255, description="The model id (default: from the path)")
    copy_files: bool = Field(
        default=False,
        alias="copy",
        description="Copy it into the models directory (default: registered where it is, nothing copied)",
    )
    probe: bool = Field(default=True, description="Probe it in the background once added")


class AddedModel(BaseModel):
    id: str
    source: str
    path: str
    size_bytes: int
    origin: str | None
    probing: bool


@router.post("", status_code=201)
async def add_model(session: SessionDep, body: ModelAdd) -> AddedModel:
    """Register an MLX or Hugging Face-layout directory in place (or copied), or convert a GGUF
    file; 400 says why a path cannot be used, 409 when the id or the files are registered."""
    record = await add_model_from_disk(session, body.path, body.id, copy=body.copy_files, probe=body.probe)
    return AddedModel(
        id=record.id,
        source=str(record.source),
        path=record.path,
        size_bytes=record.size_bytes,
        origin=record.origin,
        probing=body.probe,
    )


@router.get("/{model_id:path}/defaults")
def get_defaults(session: SessionDep, model_id: str) -> ModelDefaults:
    """What the model runs with when a request leaves it out (null: not set)."""
    return model_defaults(session, model_id)


@router.patch("/{model_id:path}/defaults")
def patch_defaults(session: SessionDep, model_id: str, body: ModelDefaults) -> ModelDefaults:
    """Change the keys sent (null clears one); the others stay. Applies from the next request."""
    return update_model_defaults(session, model_id, body.model_dump(exclude_unset=True))


@router.put("/{model_id:path}/defaults")
def put_defaults(session: SessionDep, model_id: str, body: ModelDefaults) -> ModelDefaults:
    """Replace all of them: a key not sent is cleared."""
    return replace_model_defaults(session, model_id, body.model_dump(exclude_none=True))
