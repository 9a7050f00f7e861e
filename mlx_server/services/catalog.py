"""The models the server can serve, as OpenAI model objects."""

from __future__ import annotations

from sqlmodel import Session

from mlx_server.errors import ModelNotFoundError
from mlx_server.models.store import get_model, list_models
from mlx_server.records import ModelRecord
from mlx_server.schemas.openai import ModelList, ModelObject


def _model_object(record: ModelRecord) -> ModelObject:
    # owned_by names where the model came from, as LM Studio and Ollama do for local models.
    return ModelObject(id=record.id, created=int(record.created_at.timestamp()), owned_by=str(record.source))


def list_model_objects(session: Session) -> ModelList:
    return ModelList(data=[_model_object(r) for r in list_models(session)])


def get_model_object(session: Session, model_id: str) -> ModelObject:
    record = get_model(session, model_id)
    if record is None:
        raise ModelNotFoundError(model_id)
    return _model_object(record)
