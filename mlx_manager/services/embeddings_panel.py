"""The Embeddings panel: several texts, one embedding model, their cosine similarity matrix."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from sqlmodel import Session, select

from mlx_manager.services.forms import FormError
from mlx_server.facade import (
    ModelCapabilities,
    ModelType,
    create_embeddings,
    detect_model_type,
    input_list,
    list_models,
)

MAX_TEXTS = 16
EXAMPLE_TEXTS = ("A cat sits on the mat", "A kitten is resting on a rug", "Stock markets fell sharply today")


@dataclass(frozen=True)
class Similarities:
    model: str
    texts: list[str]
    matrix: list[list[float]]  # cosine similarity of every pair, rows and columns in text order
    dimensions: int
    prompt_tokens: int
    seconds: float


def embedding_models(session: Session) -> list[str]:
    """Ids of the embedding models: as probed, or detected from the files of unprobed ones."""
    probed = {c.model_id: c.model_type for c in session.exec(select(ModelCapabilities))}
    return [
        record.id
        for record in list_models(session)
        if (probed.get(record.id) or detect_model_type(Path(record.path))) == ModelType.EMBEDDINGS
    ]


def split_texts(raw: str) -> list[str]:
    """One text per non-empty line; between 2 and MAX_TEXTS of them."""
    texts = [line.strip() for line in raw.splitlines() if line.strip()]
    if not 2 <= len(texts) <= MAX_TEXTS:
        raise FormError(f"Enter between 2 and {MAX_TEXTS} texts, one per line ({len(texts)} given).")
    return texts


async def similarities(model: str, texts: list[str]) -> Similarities:
    """Embed `texts` through the server's pipeline (the /v1/embeddings code) and compare them."""
    started = time.perf_counter()
    result = await create_embeddings(model, input_list(texts))
    seconds = time.perf_counter() - started
    vectors = result.vectors / np.maximum(np.linalg.norm(result.vectors, axis=1, keepdims=True), 1e-12)
    return Similarities(
        model=model,
        texts=texts,
        matrix=(vectors @ vectors.T).astype(float).round(3).tolist(),
        dimensions=result.dimensions,
        prompt_tokens=result.prompt_tokens,
        seconds=seconds,
    )
