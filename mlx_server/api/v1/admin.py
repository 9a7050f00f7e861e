"""Admin endpoints under /v1/admin: model pool and audit log (thin: parse, dispatch to services)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Request
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from mlx_server.database import SessionDep
from mlx_server.errors import APIError
from mlx_server.records import AuditLog
from mlx_server.schemas.limits import MAX_MODEL_NAME_CHARS, TextOnly
from mlx_server.services.operations.audit import MAX_QUERY_LIMIT, audit_service
from mlx_server.services.operations.audit_search import shown
from mlx_server.services.operations.model_options import (
    ModelOptions,
    model_options,
    update_model_options,
)
from mlx_server.services.operations.pool_admin import load_model, pool_status, set_pinned, unload_model

router = APIRouter(prefix="/admin", tags=["admin"])


class AuditQuery(BaseModel):
    """Filters of GET /admin/audit; every one optional, all combined with AND."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    model: str | None = None
    endpoint: str | None = Field(default=None, description='Exact, e.g. "POST /v1/chat/completions"')
    status: int | None = Field(default=None, ge=100, le=599)
    status_class: Literal["1xx", "2xx", "3xx", "4xx", "5xx"] | None = None
    since: datetime | None = Field(default=None, description="ISO 8601; without an offset it is UTC")
    limit: int = Field(default=50, ge=1, le=MAX_QUERY_LIMIT)
    offset: int = Field(default=0, ge=0, le=2**63 - 1)  # SQLite integers are signed 64-bit

    @field_validator("since")
    @classmethod
    def _aware(cls, since: datetime | None) -> datetime | None:
        return since.replace(tzinfo=UTC) if since is not None and since.tzinfo is None else since


class AuditPage(BaseModel):
    object: Literal["list"] = "list"
    data: list[AuditLog]
    total: int
    limit: int
    offset: int


def query_parameters(model: type[BaseModel]) -> dict[str, Any]:
    """OpenAPI `parameters` for a query model parsed from the Request (so docs list them)."""
    properties = model.model_json_schema()["properties"]
    return {"parameters": [{"name": n, "in": "query", "schema": p} for n, p in properties.items()]}


def audit_query(request: Request) -> AuditQuery:
    """The query string as AuditQuery; a bad value is a 400 naming the parameter."""
    try:
        return AuditQuery.model_validate(dict(request.query_params))
    except ValidationError as exc:
        error = exc.errors()[0]
        param = str(error["loc"][0]) if error["loc"] else None
        value = request.query_params.get(param) if param else None
        raise APIError(400, f"Invalid {param}={value!r}: {error['msg']}.", param=param) from None


@router.get("/audit", openapi_extra=query_parameters(AuditQuery))
def list_audit_log(session: SessionDep, query: Annotated[AuditQuery, Depends(audit_query)]) -> AuditPage:
    """Recorded /v1 requests, newest first, with the total matching the filters."""
    rows, total = audit_service.query(session, **query.model_dump())
    return AuditPage(data=[shown(row) for row in rows], total=total, limit=query.limit, offset=query.offset)


@router.get("/pool")
def get_pool() -> dict[str, Any]:
    """Loaded models (size, last use, pinned, requests in flight), budget and memory in use."""
    return pool_status()


@router.post("/models/{model_id:path}/load")
async def load(model_id: str, pin: bool = True) -> dict[str, Any]:
    """Load a model now; by default pin it (a preload: never evicted, never idle-unloaded)."""
    return await load_model(model_id, pin=pin)


@router.post("/models/{model_id:path}/pin")
def pin(session: SessionDep, model_id: str) -> dict[str, Any]:
    return set_pinned(session, model_id, True)


@router.post("/models/{model_id:path}/unpin")
def unpin(session: SessionDep, model_id: str) -> dict[str, Any]:
    return set_pinned(session, model_id, False)


class ModelOptionsUpdate(TextOnly):
    """PATCH body: only the fields sent change; null clears one."""

    model_config = ConfigDict(extra="forbid")

    draft_model: str | None = Field(
        default=None,
        max_length=MAX_MODEL_NAME_CHARS,
        description="A local text model with the same vocabulary",
    )
    kv_bits: int | None = Field(default=None, description="4 or 8; null: the KV cache is not quantized")
    kv_group_size: int | None = Field(default=None, description="32, 64 or 128; null: 64")


@router.get("/models/{model_id:path}/options")
def get_model_options(session: SessionDep, model_id: str) -> ModelOptions:
    """The model's generation options: its draft model and KV cache quantization."""
    return model_options(session, model_id)


@router.patch("/models/{model_id:path}/options")
async def patch_model_options(session: SessionDep, model_id: str, body: ModelOptionsUpdate) -> ModelOptions:
    """Set the draft model (speculative decoding) and KV cache quantization; a loaded model
    reloads with them (409 while it serves requests)."""
    return await update_model_options(session, model_id, body.model_dump(exclude_unset=True))


@router.post("/models/{model_id:path}/unload")
async def unload(session: SessionDep, model_id: str) -> dict[str, Any]:
    """Unload and free the model's memory; refused (409) while it serves requests."""
    return await unload_model(session, model_id)
