"""The model pool (blueprint §10.3, §10.5): hot models in an LRU bounded by memory and count.

All pool state is mutated on the event loop; loading and freeing run on the MLX thread.
Loads are serialized (one lock for "make room, then load"), so a replacement never loads
while the model it replaces still holds its memory, and concurrent first requests for one
model share a single load.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import math
import time
from collections import OrderedDict
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from typing import Any

import mlx.core as mx

from mlx_server.config import get_settings
from mlx_server.errors import APIError
from mlx_server.models.adapters import create_adapter
from mlx_server.models.detection import ModelType
from mlx_server.models.loaders import (
    ENDPOINTS,
    LOADERS,
    LoadedModel,
    ModelSpec,
    files_missing,
    generation_options,
    read_spec,
)
from mlx_server.models.prompt_cache import MiB
from mlx_server.models.prompt_cache_store import attach_disk, prompt_cache_disk_figures
from mlx_server.records import ModelCapabilities
from mlx_server.utils.memory import GB, default_budget_bytes, release_free_heap
from mlx_server.utils.metal import run_on_metal_thread

logger = logging.getLogger("mlx_server.pool")

# How long a client should wait before retrying when every model in the way is busy.
BUSY_RETRY_AFTER_SECONDS = 5


def _check_type(model_id: str, actual: ModelType, wanted: ModelType | tuple[ModelType, ...] | None) -> None:
    wanted_types = (wanted,) if isinstance(wanted, ModelType) else wanted
    if wanted_types is None or actual in wanted_types:
        return
    raise APIError(
        400,
        f"Model {model_id!r} is of type {actual}; use {ENDPOINTS[actual]} with it "
        f"(this endpoint serves {' and '.join(wanted_types)} models).",
        param="model",
        code="wrong_model_type",
    )


def _free_memory() -> None:
    gc.collect()
    mx.clear_cache()
    release_free_heap()


def _gb(size: int) -> str:
    return f"{size / GB:.2f} GB"


class ModelPoolManager:
    def __init__(self, *, budget_bytes: int, max_models: int, idle_ttl_seconds: float) -> None:
        self.budget_bytes = budget_bytes
        self.max_models = max_models
        self.idle_ttl_seconds = idle_ttl_seconds
        self._models: OrderedDict[str, LoadedModel] = OrderedDict()  # least recently used first
        self._loading: dict[str, asyncio.Task[LoadedModel]] = {}
        self._load_lock = asyncio.Lock()
        self.load_count = 0

    # --- Using models ---

    async def acquire(
        self, model_id: str, model_type: ModelType | tuple[ModelType, ...] | None = None
    ) -> LoadedModel:
        """The loaded model, loading it if needed; pair with release() (or use lease()).

        `model_type`: the type the caller serves; a model of another type is a 400 naming the
        endpoint that serves it, decided before anything is loaded."""
        for _ in range(3):
            loaded = self._models.get(model_id)
            if loaded is not None and loaded.path is not None and not (loaded.path / "config.json").is_file():
                await self._drop_vanished(loaded)
                raise files_missing(model_id, loaded.path)
            if loaded is None:
                spec = read_spec(model_id)
                _check_type(model_id, spec.model_type, model_type)
                loaded = await self._load_shared(spec)
            _check_type(model_id, loaded.model_type, model_type)
            if loaded.sharded is not None:
                loaded.sharded.check_available()  # a degraded group: 503 naming the node
            # Another load may have evicted it between its load and this waiter resuming.
            if self._models.get(model_id) is loaded:
                loaded.active += 1
                loaded.last_used = time.time()
                self._models.move_to_end(model_id)
                return loaded
        raise APIError(
            503,
            f"Model {model_id!r} keeps being evicted by other loads; retry shortly.",
            headers={"Retry-After": str(BUSY_RETRY_AFTER_SECONDS)},
        )

    async def _drop_vanished(self, loaded: LoadedModel) -> None:
        """A loaded model whose files went away is unloaded once idle: its memory goes back, and
        every request gets the same refusal whether or not it was loaded."""
        if not loaded.active and self._models.get(loaded.model_id) is loaded:
            logger.warning("unloading %s: its files are gone from %s", loaded.model_id, loaded.path)
            await self._evict(loaded.model_id)

    def release(self, loaded: LoadedModel) -> None:
        loaded.active -= 1
        loaded.last_used = time.time()

    @asynccontextmanager
    async def lease(
        self, model_id: str, model_type: ModelType | tuple[ModelType, ...] | None = None
    ) -> AsyncIterator[LoadedModel]:
        loaded = await self.acquire(model_id, model_type)
        try:
            yield loaded
        finally:
            self.release(loaded)

    def get_loaded(self, model_id: str) -> LoadedModel | None:
        return self._models.get(model_id)

    def sharding_of(self, model_id: str) -> dict[str, Any] | None:
        """The `sharded` marker of a model served by a group of ranks (its listings), else None."""
        loaded = self._models.get(model_id)
        return loaded.sharded.describe() if loaded is not None and loaded.sharded is not None else None

    # --- Admin ---

    async def install(self, loaded: LoadedModel) -> None:
        """Serve `loaded`, made elsewhere (a sharded model: mlx_server/distributed/service.py),
        pinned, in place of what the pool holds under its id; room is made for its size."""
        async with self._load_lock:
            if loaded.model_id in self._models:
                await self.unload(loaded.model_id)
            await self._make_room(loaded.model_id, loaded.size_bytes)
            loaded.pinned = True
            self._models[loaded.model_id] = loaded
            self.load_count += 1

    async def preload(self, model_id: str, *, pin: bool = True) -> LoadedModel:
        async with self.lease(model_id) as loaded:
            loaded.pinned = loaded.pinned or pin
            return loaded

    def set_pinned(self, model_id: str, pinned: bool) -> LoadedModel:
        loaded = self._models.get(model_id)
        if loaded is None:
            raise APIError(409, f"Model {model_id!r} is not loaded; load it first.", param="model")
        loaded.pinned = pinned
        return loaded

    def apply_capabilities(self, capabilities: ModelCapabilities) -> None:
        """A loaded model takes a new probe's parsers now rather than at its next load."""
        loaded = self._models.get(capabilities.model_id)
        if loaded is None:
            return
        if loaded.adapter is not None:  # text models; an embedding model has no parsers to swap
            loaded.adapter = create_adapter(loaded.family, loaded.tokenizer, capabilities)
        loaded.probed = True

    async def unload(self, model_id: str) -> None:
        loaded = self._models.get(model_id)
        if loaded is None:
            raise APIError(409, f"Model {model_id!r} is not loaded.", param="model", code="model_not_loaded")
        if loaded.active:
            raise APIError(
                409,
                f"Model {model_id!r} is serving {loaded.active} request(s); unload it when they finish.",
                param="model",
                code="model_busy",
            )
        await self._evict(model_id)

    def idle_ttl_of(self, loaded: LoadedModel) -> float:
        """Seconds `loaded` may sit idle before the sweep unloads it (math.inf: never): a
        client's keep_alive, else the pool's TTL (0 disables it); a pinned model never."""
        if loaded.pinned:
            return math.inf
        if loaded.keep_alive_s is not None:
            return loaded.keep_alive_s
        return self.idle_ttl_seconds if self.idle_ttl_seconds > 0 else math.inf

    async def evict_idle(self) -> list[str]:
        """Unload the models unused for longer than their idle TTL (`idle_ttl_of`)."""
        now = time.time()
        idle = [m for m in self._models.values() if not m.active and now - m.last_used >= self.idle_ttl_of(m)]
        for loaded in idle:
            logger.info("unloading %s: idle for more than %.0f s", loaded.model_id, self.idle_ttl_of(loaded))
            await self._evict(loaded.model_id)
        return [m.model_id for m in idle]

    async def unload_all(self) -> None:
        for model_id in list(self._models):
            await self._evict(model_id)

    @property
    def used_bytes(self) -> int:
        """Weights plus the prompt caches kept beside them."""
        return sum(m.size_bytes + m.prompt_cache.nbytes for m in self._models.values())

    @property
    def prompt_cache_bytes(self) -> int:
        return sum(m.prompt_cache.nbytes for m in self._models.values())

    def status(self) -> dict[str, Any]:
        return {
            "budget_bytes": self.budget_bytes,
            "used_bytes": self.used_bytes,
            "prompt_cache_bytes": self.prompt_cache_bytes,
            # The bound of all models' prompt caches together (MLX_SERVER_PROMPT_CACHE_MB).
            "prompt_cache_max_bytes": get_settings().prompt_cache_mb * MiB,
            # Their evicted entries on disk (MLX_SERVER_PROMPT_CACHE_DISK_MB).
            "prompt_cache_disk": prompt_cache_disk_figures(),
            "max_models": self.max_models,
            "idle_ttl_seconds": self.idle_ttl_seconds,
            "loading": sorted(self._loading),
            "models": [
                {
                    "id": m.model_id,
                    "type": str(m.model_type),
                    "family": m.family,
                    "size_bytes": m.size_bytes,
                    "loaded_at": m.loaded_at,
                    "last_used": m.last_used,
                    "pinned": m.pinned,
                    "active_requests": m.active,
                    "probed": m.probed,
                    "prompt_cache": m.prompt_cache.figures(),
                    **generation_options(m),
                    **({"sharded": m.sharded.describe()} if m.sharded is not None else {}),
                }
                for m in reversed(self._models.values())  # most recently used first
            ],
        }

    # --- Loading and eviction ---

    async def _load_shared(self, spec: ModelSpec) -> LoadedModel:
        model_id = spec.model_id
        task = self._loading.get(model_id)
        if task is None:
            task = asyncio.create_task(self._load(spec), name=f"load {model_id}")
            self._loading[model_id] = task
            task.add_done_callback(lambda done: self._load_finished(model_id, done))
        # shield: a waiter that gives up (client gone) does not cancel the others' load.
        return await asyncio.shield(task)

    def _load_finished(self, model_id: str, task: asyncio.Task[LoadedModel]) -> None:
        if self._loading.get(model_id) is task:
            del self._loading[model_id]
        if not task.cancelled():
            task.exception()  # retrieved here so an unobserved failure is not logged as lost

    async def _load(self, spec: ModelSpec) -> LoadedModel:
        model_id = spec.model_id
        loader = LOADERS.get(spec.model_type)
        if loader is None:
            raise APIError(
                400,
                f"Model {model_id!r} is a {spec.model_type} model, which this server cannot load yet.",
                param="model",
                code="model_type_unsupported",
            )
        async with self._load_lock:
            existing = self._models.get(model_id)
            if existing is not None:
                return existing
            await self._make_room(model_id, spec.estimate_bytes)
            started = time.perf_counter()
            loaded = await run_on_metal_thread(lambda: loader(spec))
            await run_on_metal_thread(partial(attach_disk, spec, loaded.prompt_cache))
            self._models[model_id] = loaded
            self.load_count += 1
            logger.info(
                "loaded %s (%s, family %s) in %.2f s",
                model_id,
                _gb(loaded.size_bytes),
                spec.family,
                time.perf_counter() - started,
            )
            return loaded

    async def _make_room(self, model_id: str, need: int) -> None:
        if need > self.budget_bytes:
            raise APIError(
                507,
                f"Model {model_id!r} needs about {_gb(need)}, more than the pool's memory budget of "
                f"{_gb(self.budget_bytes)}; raise MLX_SERVER_MAX_MEMORY_GB or use a smaller quantization.",
                param="model",
                code="model_too_large",
            )
        await self._shed_prompt_caches(self.budget_bytes - need)
        while self.used_bytes + need > self.budget_bytes or len(self._models) >= self.max_models:
            victim = next((i for i, m in self._models.items() if not m.pinned and not m.active), None)
            if victim is not None:
                logger.info("evicting %s to make room for %s", victim, model_id)
                await self._evict(victim)
                continue
            if any(not m.pinned for m in self._models.values()):
                raise APIError(
                    503,
                    f"Loading {model_id!r} needs memory held by models that are generating; retry shortly.",
                    headers={"Retry-After": str(BUSY_RETRY_AFTER_SECONDS)},
                    code="pool_busy",
                )
            raise APIError(
                507,
                f"Pinned models fill the pool ({_gb(self.used_bytes)} of {_gb(self.budget_bytes)}, "
                f"{len(self._models)} of {self.max_models} models); unpin one to load {model_id!r}.",
                param="model",
                code="pool_full",
            )

    async def _shed_prompt_caches(self, target_bytes: int) -> None:
        """Drop prompt cache entries, least recently used model first, until the pool holds at
        most `target_bytes`: they are cheaper to lose than a loaded model."""
        for loaded in list(self._models.values()):
            excess = self.used_bytes - target_bytes
            if excess <= 0:
                return
            cache = loaded.prompt_cache
            await run_on_metal_thread(partial(cache.trim_to, max(0, cache.nbytes - excess)))

    async def _evict(self, model_id: str) -> None:
        loaded = self._models.pop(model_id)
        if loaded.sharded is not None:
            loaded.sharded.close()  # its ranks end with it
        # Drop the weights here: an evicted object still referenced elsewhere must not keep them.
        loaded.model = loaded.draft_model = None
        cache = loaded.prompt_cache
        del loaded

        def free() -> None:  # on the MLX thread, where the model's last generation gave its cache back
            cache.clear()  # long entries go to the disk tier (prompt_cache_store.py)
            _free_memory()

        await run_on_metal_thread(free)


_pool: ModelPoolManager | None = None


def get_model_pool() -> ModelPoolManager:
    global _pool
    if _pool is None:
        settings = get_settings()
        budget = int(settings.max_memory_gb * GB) if settings.max_memory_gb else default_budget_bytes()
        _pool = ModelPoolManager(
            budget_bytes=budget, max_models=settings.max_models, idle_ttl_seconds=settings.idle_ttl_seconds
        )
    return _pool


def reset_model_pool() -> None:
    """Forget the pool (tests, an app's shutdown); the models it held are freed with it. The full
    collection (~0.2 s over mlx's, transformers' and the app's objects) runs only if the pool
    ever loaded a model: an app stopped without one (most tests) has nothing to free."""
    global _pool
    pool, _pool = _pool, None
    if pool is not None and pool.load_count:
        gc.collect()
        mx.clear_cache()
