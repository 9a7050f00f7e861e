"""OpenAI embeddings types (POST /v1/embeddings)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from mlx_server.schemas.limits import MAX_MODEL_NAME_CHARS, MAX_USER_CHARS, TextOnly

# A string, strings, the model's own token ids, or lists of them (OpenAI's four input forms).
EmbeddingInput = str | list[str] | list[int] | list[list[int]]


class EmbeddingRequest(TextOnly):
    model_config = ConfigDict(extra="ignore")

    model: str = Field(min_length=1, max_length=MAX_MODEL_NAME_CHARS)
    input: EmbeddingInput
    encoding_format: Literal["float", "base64"] = "float"
    dimensions: int | None = None
    user: str | None = Field(default=None, max_length=MAX_USER_CHARS)
    # Ours: cut inputs longer than the model's maximum instead of refusing them (see README).
    truncate: bool = False


class Embedding(BaseModel):
    object: Literal["embedding"] = "embedding"
    index: int
    # base64: the little-endian float32 bytes, as OpenAI sends them.
    embedding: list[float] | str


class EmbeddingUsage(BaseModel):
    prompt_tokens: int
    total_tokens: int


class EmbeddingResponse(BaseModel):
    object: Literal["list"] = "list"
    data: list[Embedding] = Field(default_factory=list)
    model: str
    usage: EmbeddingUsage
