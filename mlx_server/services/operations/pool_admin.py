"""Pool operations for the admin API and the dashboard: status (and the header's summary, one
model's state, the budget), load (pin), unload, and the pool's limits changed at run time
(stored as setting overrides, applied live)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlmodel import Session

from mlx_server.config import get_settings
from mlx_server.database import background_session
from mlx_server.errors import APIError, ModelNotFoundError
from mlx_server.models.lora import find_adapter
from mlx_server.models.pool import get_model_pool
from mlx_server.models.store import get_model
from mlx_server.services.operations.setting_overrides import delete_override, read_override, write_override
from mlx_server.services.pipeline.engine.batching import batch_figures, batch_size_for
from mlx_server.services.pipeline.engine.generation import admission
from mlx_server.utils.memory import (
    GB,
    active_memory_bytes,
    default_budget_bytes,
    physical_memory_bytes,
    process_rss_bytes,
)


def _iso(timestamp: float) -> str:
    return datetime.fromtimestamp(timestamp, UTC).isoformat()


def pool_status() -> dict[str, Any]:
    status = get_model_pool().status()
    batches = batch_figures()
    for model in status["models"]:
        model["loaded_at"] = _iso(model["loaded_at"])
        model["last_used"] = _iso(model["last_used"])
        # Continuous batching: the model's batch size and its generations decoding ("running"),
        # prefilling and waiting for a place ("queued"); an idle model has none.
        idle = {"max_batch_size": batch_size_for(model["id"]), "running": 0, "prefilling": 0, "queued": 0}
        model["batch"] = batches.get(model["id"], idle)
    status["mlx_active_memory_bytes"] = active_memory_bytes()
    status["process_rss_bytes"] = process_rss_bytes()
    # The admission queue: generations running or waiting for the MLX thread, and how many may
    # (MLX_SERVER_MAX_PENDING_REQUESTS); past it a request gets 503 with Retry-After.
    status["pending_requests"] = admission.pending
    status["max_pending_requests"] = get_settings().max_pending_requests
    status["prefill_chunk_tokens"] = get_settings().prefill_chunk_tokens
    return status


def _entry(model_id: str) -> dict[str, Any]:
    return next(m for m in pool_status()["models"] if m["id"] == model_id)


async def load_model(model_id: str, *, pin: bool) -> dict[str, Any]:
    """Load now (a preload); pinned models are never evicted or unloaded for idleness."""
    await get_model_pool().preload(model_id, pin=pin)
    return _entry(model_id)


def _registered(session: Session, model_id: str) -> None:
    """404 for an id no model has (a typo, a made-up path), rather than 409 "not loaded"."""
    if get_model(session, model_id) is None and find_adapter(session, model_id) is None:
        raise ModelNotFoundError(model_id)


def set_pinned(session: Session, model_id: str, pinned: bool) -> dict[str, Any]:
    _registered(session, model_id)
    get_model_pool().set_pinned(model_id, pinned)
    return _entry(model_id)


async def unload_model(session: Session, model_id: str) -> dict[str, Any]:
    _registered(session, model_id)
    await get_model_pool().unload(model_id)
    return {"id": model_id, "unloaded": True}


# --- Limits changed at run time (the dashboard's server page) ---

MAX_MODELS_LIMIT = 64


@dataclass(frozen=True)
class PoolLimits:
    max_memory_gb: float
    max_models: int
    idle_ttl_seconds: float
    # Whether each comes from the dashboard (True) or the environment / machine default.
    overridden: frozenset[str] = frozenset()


def pool_limits(session: Session) -> PoolLimits:
    pool = get_model_pool()
    overridden = frozenset(k for k in LIMIT_KEYS if read_override(session, k) is not None)
    return PoolLimits(pool.budget_bytes / GB, pool.max_models, pool.idle_ttl_seconds, overridden)


def set_pool_limits(
    session: Session, *, max_memory_gb: float, max_models: int, idle_ttl_seconds: float
) -> PoolLimits:
    """Store and apply at once; a lower budget or count is enforced on the next load (models
    serving requests are never pulled from under them)."""
    physical = physical_memory_bytes() / GB
    if not 0.1 <= max_memory_gb <= physical:
        raise ValueError(f"memory budget must be between 0.1 and {physical:.1f} GB (this machine's RAM)")
    if not 1 <= max_models <= MAX_MODELS_LIMIT:
        raise ValueError(f"max models must be between 1 and {MAX_MODELS_LIMIT}")
    if idle_ttl_seconds < 0:
        raise ValueError("idle TTL must be 0 (never unload) or more seconds")
    values = {"max_memory_gb": max_memory_gb, "max_models": max_models, "idle_ttl_seconds": idle_ttl_seconds}
    for key, value in values.items():
        write_override(session, key, value)
    _apply(values)
    return pool_limits(session)


def reset_pool_limits(session: Session) -> PoolLimits:
    """Back to the environment's limits (MLX_SERVER_MAX_MEMORY_GB, ...)."""
    for key in LIMIT_KEYS:
        delete_override(session, key)
    settings = get_settings()
    _apply(
        {
            "max_memory_gb": settings.max_memory_gb or default_budget_bytes() / GB,
            "max_models": settings.max_models,
            "idle_ttl_seconds": settings.idle_ttl_seconds,
        }
    )
    return pool_limits(session)


def apply_stored_pool_limits() -> None:
    """At start: the dashboard's overrides win over the environment."""
    with background_session() as session:
        stored = {k: v for k in LIMIT_KEYS if isinstance(v := read_override(session, k), int | float)}
    _apply(stored)


LIMIT_KEYS = ("max_memory_gb", "max_models", "idle_ttl_seconds")


def _apply(values: dict[str, Any]) -> None:
    pool = get_model_pool()
    if "max_memory_gb" in values:
        pool.budget_bytes = int(float(values["max_memory_gb"]) * GB)
    if "max_models" in values:
        pool.max_models = int(values["max_models"])
    if "idle_ttl_seconds" in values:
        pool.idle_ttl_seconds = float(values["idle_ttl_seconds"])


async def unload_all() -> list[str]:
    """Unload every model that is not serving a request (busy ones stay; say so)."""
    pool = get_model_pool()
    idle = [m["id"] for m in pool.status()["models"] if not m["active_requests"]]
    unloaded = []
    for model_id in idle:
        try:
            await pool.unload(model_id)
        except APIError:  # a request arrived meanwhile: that model stays
            continue
        unloaded.append(model_id)
    return unloaded


def pool_summary() -> dict[str, int]:
    """The dashboard header's pool indicator: models loaded, memory used and the budget."""
    status = get_model_pool().status()
    return {"loaded": len(status["models"]), "used": status["used_bytes"], "budget": status["budget_bytes"]}


@dataclass(frozen=True)
class PoolState:
    """One model's place in the pool right now."""

    loaded: bool
    pinned: bool = False
    busy: bool = False  # serving requests


def pool_state(model_id: str) -> PoolState:
    loaded = get_model_pool().get_loaded(model_id)
    if loaded is None:
        return PoolState(loaded=False)
    return PoolState(loaded=True, pinned=loaded.pinned, busy=loaded.active > 0)


def memory_budget_bytes() -> int:
    """The pool's memory budget (what a model must fit in)."""
    return get_model_pool().budget_bytes
