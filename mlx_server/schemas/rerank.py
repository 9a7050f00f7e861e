"""POST /v1/rerank (and /rerank) in the shape Cohere, Jina, llama-server and Open WebUI use."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

# Cohere's own limit on documents per request.
MAX_DOCUMENTS = 1000


class RerankRequest(BaseModel):
    model: str
    query: str = Field(min_length=1)
    # Strings, or objects with a "text" field (Cohere v1, Jina); returned as objects either way.
    documents: list[str | dict[str, Any]] = Field(min_length=1, max_length=MAX_DOCUMENTS)
    top_n: int | None = Field(default=None, ge=1)
    return_documents: bool = False


class RerankDocument(BaseModel):
    text: str


class RerankResult(BaseModel):
    index: int
    relevance_score: float
    document: RerankDocument | None = None


class RerankUsage(BaseModel):
    prompt_tokens: int
    total_tokens: int


class RerankMeta(BaseModel):
    """How the scores were made: a cross-encoder's relevance in (0, 1), or the cosine similarity
    of an embedding model's vectors in [-1, 1] (not a relevance model; ranks, never calibrated)."""

    method: Literal["cross-encoder", "cosine"]
    billed_units: dict[str, int]


class RerankResponse(BaseModel):
    id: str
    model: str
    results: list[RerankResult]
    usage: RerankUsage
    meta: RerankMeta
