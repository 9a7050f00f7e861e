"""Documents ranked by relevance to a query (POST /v1/rerank).

With a cross-encoder (`ModelType.RERANK`, models/cross_encoder.py) each (query, document) pair
goes through the model together and its score is the model's relevance in (0, 1). With an
embedding model the query and the documents are embedded (the /v1/embeddings path) and the
score is their cosine similarity in [-1, 1]; `method` says which, so a response never passes
one off as the other. Pairs run in batches of 32, one MLX job each (tokenizing included: a fast
tokenizer with truncation set is not safe to share between threads), like embeddings.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Any, Literal

import mlx.core as mx
import numpy as np

from mlx_server.models.detection import CROSS_ENCODER_ARCHITECTURES, ModelType, cross_encoder_architecture
from mlx_server.models.loaders import LoadedModel
from mlx_server.models.pool import get_model_pool
from mlx_server.services.pipeline.embeddings import create_embeddings
from mlx_server.services.pipeline.engine.generation import admission
from mlx_server.utils.metal import run_on_metal_thread

BATCH_SIZE = 32
RerankMethod = Literal["cross-encoder", "cosine"]


@dataclass(frozen=True)
class Ranking:
    scores: list[float]  # one per document, in the request's order
    method: RerankMethod
    prompt_tokens: int


async def rerank(model_id: str, query: str, documents: list[str]) -> Ranking:
    """Score every document against `query` with `model_id` (a reranker or an embedding model)."""
    admission.acquire()
    try:
        async with get_model_pool().lease(model_id, (ModelType.RERANK, ModelType.EMBEDDINGS)) as loaded:
            if loaded.model_type is ModelType.RERANK:
                return await _cross_encode(loaded, query, documents)
    finally:
        admission.release()
    return await _cosine(model_id, query, documents)


async def _cross_encode(loaded: LoadedModel, query: str, documents: list[str]) -> Ranking:
    scores: list[float] = []
    tokens = 0
    for start in range(0, len(documents), BATCH_SIZE):
        batch = documents[start : start + BATCH_SIZE]
        batch_scores, batch_tokens = await run_on_metal_thread(partial(score_pairs, loaded, query, batch))
        scores += batch_scores
        tokens += batch_tokens
    return Ranking(scores, "cross-encoder", tokens)


def max_pair_tokens(loaded: LoadedModel) -> int:
    """The longest input the model takes: its position table (less RoBERTa's two offset slots)."""
    positions = int(loaded.config.get("max_position_embeddings") or 512)
    architecture = cross_encoder_architecture(loaded.config)
    if architecture is not None and CROSS_ENCODER_ARCHITECTURES[architecture] == "roberta":
        positions -= 2
    limit = getattr(loaded.tokenizer, "model_max_length", positions)
    return min(positions, limit) if isinstance(limit, int) else positions


def score_pairs(loaded: LoadedModel, query: str, documents: list[str]) -> tuple[list[float], int]:
    """One batch through the cross-encoder (MLX thread): the relevance of each document and the
    tokens read. A pair longer than the model takes is truncated (the longer side first)."""
    from mlx_server.models.cross_encoder import relevance

    encoded: Any = loaded.tokenizer(
        [query] * len(documents),
        documents,
        padding=True,
        truncation=True,
        max_length=max_pair_tokens(loaded),
        return_tensors="np",
    )
    mask = encoded["attention_mask"]
    token_types = encoded.get("token_type_ids")
    logits = loaded.model(
        mx.array(encoded["input_ids"]),
        token_type_ids=mx.array(token_types) if token_types is not None else None,
        attention_mask=mx.array(mask),
    )
    scores = relevance(logits.astype(mx.float32))
    mx.eval(scores)
    return [float(s) for s in np.array(scores)], int(mask.sum())


async def _cosine(model_id: str, query: str, documents: list[str]) -> Ranking:
    embedded = await create_embeddings(model_id, [query, *documents], truncate=True)
    vectors = embedded.vectors / np.maximum(np.linalg.norm(embedded.vectors, axis=1, keepdims=True), 1e-12)
    scores = vectors[1:] @ vectors[0]
    return Ranking([float(s) for s in scores], "cosine", embedded.prompt_tokens)
