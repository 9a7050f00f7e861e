"""The probe of an embedding model: its profile read from its files, then checked by running it.

The profile (dimensions, pooling, normalization, longest input) comes from the model's own
sentence-transformers files; the "embed" step embeds three sentences through the same code as
/v1/embeddings and fails when the vectors do not have the profile's length or norm.
"""

from __future__ import annotations

import numpy as np
from sqlmodel import Session

from mlx_server.errors import APIError
from mlx_server.models.detection import ModelType
from mlx_server.models.embedding_profile import EmbeddingProfile
from mlx_server.models.loaders import LoadedModel
from mlx_server.models.store import save_capabilities
from mlx_server.records import ModelCapabilities
from mlx_server.services.operations.probe_steps import ProbeSteps, pool_lease, run_probe
from mlx_server.services.pipeline.embeddings import embed_batch, tokenize
from mlx_server.utils.metal import run_on_metal_thread

EMBEDDING_STEP_NAMES = ("detect", "load", "embed", "save", "unload")
# Two sentences that mean nearly the same and one that does not: the detail shows both cosines.
PROBE_TEXTS = ["A cat sits on the mat", "A kitten is resting on a rug", "Stock markets fell sharply today"]


async def probe_embedding_model(model_id: str, family: str, steps: ProbeSteps) -> ModelCapabilities:
    """Steps "load", "embed", "save", "unload" of probe_model() for an embedding model."""

    async def check(loaded: LoadedModel) -> EmbeddingProfile:
        with steps.step("embed") as outcome:
            outcome.detail = await check_embeddings(loaded)
        assert loaded.embedding is not None
        return loaded.embedding

    def save(session: Session, loaded: LoadedModel, profile: EmbeddingProfile) -> ModelCapabilities:
        return save_embedding_capabilities(session, model_id, family, profile)

    return await run_probe(
        model_id, steps, lease=pool_lease(model_id, ModelType.EMBEDDINGS), check=check, save=save
    )


async def check_embeddings(loaded: LoadedModel) -> str:
    """Embed PROBE_TEXTS; the step's detail, or an APIError when the vectors contradict the profile."""
    profile = loaded.embedding
    assert profile is not None, f"{loaded.model_id} has no embedding profile"
    rows = await run_on_metal_thread(lambda: tokenize(loaded, PROBE_TEXTS, truncate=False))
    vectors = await run_on_metal_thread(lambda: embed_batch(loaded, rows, profile.dimensions))
    norms = np.linalg.norm(vectors, axis=1)
    if vectors.shape != (len(PROBE_TEXTS), profile.dimensions) or not np.isfinite(vectors).all():
        raise APIError(
            500,
            f"{loaded.model_id!r} produced vectors of shape {vectors.shape}, not "
            f"{profile.dimensions} per input as its files say; check its config and pooling files.",
            code="probe_failed",
        )
    if profile.normalize and not np.allclose(norms, 1.0, atol=1e-3):
        raise APIError(500, f"{loaded.model_id!r} vectors should be unit length; norms {norms}.")
    unit = vectors / np.maximum(norms[:, None], 1e-12)
    similar, unrelated = float(unit[0] @ unit[1]), float(unit[0] @ unit[2])
    return (
        f"{profile.dimensions} dimensions, {profile.pooling} pooling"
        f"{', normalized' if profile.normalize else ''}, up to {profile.max_tokens} tokens; "
        f"cosine cat/kitten {similar:.2f}, cat/stock market {unrelated:.2f}"
    )


def save_embedding_capabilities(
    session: Session, model_id: str, family: str, profile: EmbeddingProfile
) -> ModelCapabilities:
    return save_capabilities(
        session,
        model_id,
        model_type=str(ModelType.EMBEDDINGS),
        model_family=family,
        embedding_dimensions=profile.dimensions,
        max_sequence_length=profile.max_tokens,
        is_normalized=profile.normalize,
        embedding_pooling=profile.pooling,
    )
