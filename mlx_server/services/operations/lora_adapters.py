"""LoRA adapters for the admin API and the dashboard: register (checked against the base model
before it is stored), list, remove (unloading it first). models/lora.py is how they load."""

from __future__ import annotations

from datetime import datetime
from functools import partial
from pathlib import Path

from pydantic import BaseModel
from sqlmodel import Session

from mlx_server.errors import APIError
from mlx_server.models.detection import ModelType
from mlx_server.models.loaders import read_spec
from mlx_server.models.lora import (
    NAME_PATTERN,
    adapter_bytes,
    adapter_model_id,
    check_adapter,
    find_adapter,
    list_adapters,
    read_adapter_config,
)
from mlx_server.models.pool import get_model_pool
from mlx_server.records import LoraAdapter, ModelRecord
from mlx_server.utils.metal import run_on_metal_thread


class AdapterView(BaseModel):
    """An adapter as the API shows it; `id` is the model id requests name."""

    id: str
    base_model: str
    name: str
    path: str
    size_bytes: int
    created_at: datetime
    loaded: bool


def adapter_view(adapter: LoraAdapter) -> AdapterView:
    return AdapterView(
        id=adapter.id,
        base_model=adapter.base_model_id,
        name=adapter.name,
        path=adapter.path,
        size_bytes=adapter.size_bytes,
        created_at=adapter.created_at,
        loaded=get_model_pool().get_loaded(adapter.id) is not None,
    )


def adapter_views(session: Session, base_model_id: str | None = None) -> list[AdapterView]:
    """Every registered adapter, or those over one base model."""
    adapters = list_adapters(session)
    return [adapter_view(a) for a in adapters if base_model_id in (None, a.base_model_id)]


async def register_adapter(session: Session, base_model_id: str, name: str, path: str) -> AdapterView:
    """Store the adapter at `path` over `base_model_id` as "<base>+<name>", once mlx-lm's
    loader accepts it on the base model (400 naming what does not fit)."""
    if not NAME_PATTERN.fullmatch(name):
        raise APIError(
            400,
            f"Adapter name {name!r}: use 1-64 letters, digits, '.', '_' or '-' (starting with a letter or "
            "digit); the model id is '<base model>+<name>'.",
            param="name",
        )
    model_id = adapter_model_id(base_model_id, name)
    base = session.get(ModelRecord, base_model_id)
    taken = find_adapter(session, model_id) is not None
    if base is None:
        raise APIError(
            404,
            f"The base model {base_model_id!r} does not exist. GET /v1/models lists the models.",
            param="base_model",
            code="model_not_found",
        )
    if taken:
        raise APIError(409, f"An adapter {model_id!r} exists already; remove it first.", param="name")
    spec = read_spec(base_model_id)
    if spec.model_type != ModelType.TEXT_GEN:
        raise APIError(
            400,
            f"{base_model_id!r} is a {spec.model_type} model; LoRA adapters apply to text models.",
            param="base_model",
        )
    try:
        directory = Path(path).expanduser().resolve()
    except RuntimeError:  # "~name" of a user this machine does not have
        raise APIError(
            400, f"No home directory for {path.split('/')[0]!r}; give a full path.", param="path"
        ) from None
    read_adapter_config(directory)  # the files and config, before any model is touched
    await run_on_metal_thread(partial(check_adapter, spec.path, directory))
    adapter = LoraAdapter(
        id=model_id,
        base_model_id=base_model_id,
        name=name,
        path=str(directory),
        size_bytes=adapter_bytes(directory),
    )
    session.add(adapter)
    session.commit()
    session.refresh(adapter)
    return adapter_view(adapter)


async def remove_adapter(session: Session, model_id: str) -> dict[str, object]:
    """Unload the adapter's model if loaded (409 while it serves requests), then forget it."""
    adapter = find_adapter(session, model_id)
    if adapter is None:
        raise APIError(
            404, f"No LoRA adapter {model_id!r} is registered.", param="model", code="model_not_found"
        )
    pool = get_model_pool()
    if pool.get_loaded(model_id) is not None:
        await pool.unload(model_id)
    stored = session.get(LoraAdapter, model_id)
    if stored is not None:
        session.delete(stored)
        session.commit()
    return {"id": model_id, "deleted": True}
