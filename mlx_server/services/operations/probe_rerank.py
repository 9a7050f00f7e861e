"""The probe of a reranker (cross-encoder): loaded, then checked by ranking two documents for a
query through the same code as /v1/rerank; stored as type rerank with its longest input."""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from sqlmodel import Session

from mlx_server.database import get_engine
from mlx_server.errors import APIError
from mlx_server.models.detection import ModelType
from mlx_server.models.loaders import LoadedModel
from mlx_server.models.pool import ModelPoolManager, get_model_pool
from mlx_server.models.store import save_capabilities
from mlx_server.records import ModelCapabilities
from mlx_server.services.pipeline.rerank import max_pair_tokens, score_pairs
from mlx_server.utils.metal import run_on_metal_thread

if TYPE_CHECKING:
    from mlx_server.services.operations.probe import _Steps

    Unload = Callable[
        [ModelPoolManager, LoadedModel, bool, ModelCapabilities | None, _Steps], Awaitable[None]
    ]

RERANK_STEP_NAMES = ("detect", "load", "rerank", "save", "unload")
PROBE_QUERY = "a cat naps"
PROBE_DOCUMENTS = ["a kitten sleeps", "stock markets fell"]


async def probe_rerank_model(model_id: str, family: str, steps: _Steps, unload: Unload) -> ModelCapabilities:
    """Steps "load", "rerank", "save", "unload" of probe_model() for a cross-encoder."""
    pool = get_model_pool()
    was_loaded = pool.get_loaded(model_id) is not None
    with steps.step("load") as outcome:
        loaded = await pool.acquire(model_id, ModelType.RERANK)
        outcome.detail = "already loaded" if was_loaded else "loaded"
    try:
        with steps.step("rerank") as outcome:
            scores, _ = await run_on_metal_thread(lambda: score_pairs(loaded, PROBE_QUERY, PROBE_DOCUMENTS))
            if not all(math.isfinite(s) and 0.0 <= s <= 1.0 for s in scores):
                raise APIError(500, f"{model_id!r} gave scores {scores}, not relevances in [0, 1].")
            pairs = ", ".join(f"{d!r} {s:.3f}" for d, s in zip(PROBE_DOCUMENTS, scores, strict=True))
            outcome.detail = f"{PROBE_QUERY!r}: {pairs}"
    except BaseException:
        pool.release(loaded)
        await unload(pool, loaded, was_loaded, None, steps)
        raise
    pool.release(loaded)
    with steps.step("save") as outcome:
        with Session(get_engine()) as session:
            capabilities = save_capabilities(
                session,
                model_id,
                model_type=str(ModelType.RERANK),
                model_family=family,
                max_sequence_length=max_pair_tokens(loaded),
            )
        outcome.detail = f"ModelCapabilities of {model_id!r} stored"
    await unload(pool, loaded, was_loaded, capabilities, steps)
    return capabilities
