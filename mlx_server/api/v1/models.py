"""GET /v1/models and GET /v1/models/{id} (ids may contain '/')."""

from __future__ import annotations

from fastapi import APIRouter

from mlx_server.database import SessionDep
from mlx_server.schemas.openai import ModelList, ModelObject
from mlx_server.services.pipeline.catalog import get_model_object, list_model_objects

router = APIRouter(tags=["models"])


@router.get("/models")
def list_models(session: SessionDep) -> ModelList:
    return list_model_objects(session)


@router.get("/models/{model_id:path}")
def retrieve_model(model_id: str, session: SessionDep) -> ModelObject:
    return get_model_object(session, model_id)
