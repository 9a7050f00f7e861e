"""The models the server can serve, as OpenAI model objects."""

from __future__ import annotations

from fnmatch import fnmatchcase

from sqlmodel import Session

from mlx_server.config import get_settings
from mlx_server.database import get_engine
from mlx_server.errors import ModelNotFoundError
from mlx_server.models.lora import find_adapter, list_adapters
from mlx_server.models.pool import get_model_pool
from mlx_server.models.store import get_model, list_models
from mlx_server.records import LoraAdapter, ModelRecord
from mlx_server.schemas.openai import ModelList, ModelObject
from mlx_server.services.remote.backends import remote_model_ids


def _adapter_object(adapter: LoraAdapter) -> ModelObject:
    # A LoRA adapter over a local model (models/lora.py), requested by its own id "<base>+<name>".
    return ModelObject(id=adapter.id, created=int(adapter.created_at.timestamp()), owned_by="lora")


def _adapter_objects(session: Session) -> list[ModelObject]:
    # Only over a base that still exists (deleting a model leaves its adapters unservable).
    return [_adapter_object(a) for a in list_adapters(session) if get_model(session, a.base_model_id)]


def _model_object(record: ModelRecord) -> ModelObject:
    # owned_by names where the model came from, as LM Studio and Ollama do for local models.
    sharded = get_model_pool().sharding_of(record.id)
    return ModelObject(
        id=record.id,
        created=int(record.created_at.timestamp()),
        owned_by=str(record.source),
        **({"sharded": sharded} if sharded is not None else {}),
    )


def _remote_objects(session: Session) -> list[ModelObject]:
    # owned_by "remote:<backend>": served by a remote backend (services/remote), not this machine.
    return [
        ModelObject(
            id=model_id, created=int(created.timestamp()), owned_by=f"remote:{model_id.split('/')[0]}"
        )
        for model_id, created in remote_model_ids(session)
    ]


def list_model_objects(session: Session) -> ModelList:
    local = [_model_object(r) for r in list_models(session)] + _adapter_objects(session)
    return ModelList(data=local + _remote_objects(session))


def get_model_object(session: Session, model_id: str) -> ModelObject:
    record = get_model(session, model_id)
    adapter = find_adapter(session, model_id) if record is None else None
    if adapter is not None and get_model(session, adapter.base_model_id) is not None:
        return _adapter_object(adapter)
    if record is not None:
        return _model_object(record)
    remote = next((m for m in _remote_objects(session) if m.id == model_id), None)
    if remote is None:
        raise ModelNotFoundError(model_id)
    return remote


def resolve_model(model_id: str) -> str:
    """The local model a request names: itself if it exists, else the first alias pattern
    that matches (MLX_SERVER_MODEL_ALIASES, e.g. {"claude-*": "qwen3-8b"})."""
    aliases = get_settings().model_aliases
    target = next((t for pattern, t in aliases.items() if fnmatchcase(model_id, pattern)), None)
    if target is None:
        return model_id
    with Session(get_engine()) as session:
        return model_id if get_model(session, model_id) is not None else target
