"""The probe of a reranker (cross-encoder): loaded, then checked by ranking two documents for a
query through the same code as /v1/rerank; stored as type rerank with its longest input."""

from __future__ import annotations

import math

from sqlmodel import Session

from mlx_server.errors import APIError
from mlx_server.models.detection import ModelType
from mlx_server.models.loaders import LoadedModel
from mlx_server.models.store import save_capabilities
from mlx_server.records import ModelCapabilities
from mlx_server.services.operations.probe_steps import ProbeSteps, pool_lease, run_probe
from mlx_server.services.pipeline.rerank import max_pair_tokens, score_pairs
from mlx_server.utils.metal import run_on_metal_thread

RERANK_STEP_NAMES = ("detect", "load", "rerank", "save", "unload")
PROBE_QUERY = "a cat naps"
PROBE_DOCUMENTS = ["a kitten sleeps", "stock markets fell"]


async def probe_rerank_model(model_id: str, family: str, steps: ProbeSteps) -> ModelCapabilities:
    """Steps "load", "rerank", "save", "unload" of probe_model() for a cross-encoder."""

    async def check(loaded: LoadedModel) -> None:
        with steps.step("rerank") as outcome:
            scores, _ = await run_on_metal_thread(lambda: score_pairs(loaded, PROBE_QUERY, PROBE_DOCUMENTS))
            if not all(math.isfinite(s) and 0.0 <= s <= 1.0 for s in scores):
                raise APIError(500, f"{model_id!r} gave scores {scores}, not relevances in [0, 1].")
            pairs = ", ".join(f"{d!r} {s:.3f}" for d, s in zip(PROBE_DOCUMENTS, scores, strict=True))
            outcome.detail = f"{PROBE_QUERY!r}: {pairs}"

    def save(session: Session, loaded: LoadedModel, _: None) -> ModelCapabilities:
        return save_capabilities(
            session,
            model_id,
            model_type=str(ModelType.RERANK),
            model_family=family,
            max_sequence_length=max_pair_tokens(loaded),
        )

    return await run_probe(
        model_id, steps, lease=pool_lease(model_id, ModelType.RERANK), check=check, save=save
    )
