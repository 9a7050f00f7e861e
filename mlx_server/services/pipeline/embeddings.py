"""Embeddings (blueprint §2 `services/embeddings.py`): inputs to vectors with the model's own pooling.

Everything a request can get wrong (wrong model type, empty or too-long inputs, too many inputs,
unsupported `dimensions`) is refused before any batch runs. Inputs are sorted by length so each
batch pads little, and every batch is one job on the MLX thread: a chat stream running at the
same time interleaves between batches instead of waiting for the whole request.
"""

from __future__ import annotations

import base64
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

import mlx.core as mx
import numpy as np

from mlx_server.errors import APIError
from mlx_server.models.detection import ModelType
from mlx_server.models.embedding_profile import EmbeddingProfile
from mlx_server.models.loaders import LoadedModel
from mlx_server.models.pool import get_model_pool
from mlx_server.services.pipeline.engine.generation import admission
from mlx_server.utils.metal import run_on_metal_thread

# OpenAI's own limit per request; clients (LangChain, LlamaIndex) already split above it.
MAX_INPUTS = 2048
# Inputs run together per MLX job: large enough to keep the matrix units busy, small enough
# that a chat stream waits at most one batch.
BATCH_SIZE = 32


@dataclass(frozen=True)
class Embeddings:
    vectors: np.ndarray[Any, np.dtype[np.float32]]  # one row per input, in input order
    prompt_tokens: int
    dimensions: int


def input_list(value: str | Sequence[str] | Sequence[int] | Sequence[Sequence[int]]) -> list[Any]:
    """The request's inputs as a list: strings, or token-id lists; an empty list is refused."""
    if isinstance(value, str):
        items: list[Any] = [value]
    elif value and all(isinstance(v, int) for v in value):
        items = [list(value)]  # one input given as token ids
    else:
        items = list(value)
    if not items:
        raise APIError(400, "input is an empty list; send at least one text.", param="input")
    if len(items) > MAX_INPUTS:
        raise APIError(
            400,
            f"input has {len(items)} items; at most {MAX_INPUTS} are accepted per request. "
            "Send the rest in further requests.",
            param="input",
            code="too_many_inputs",
        )
    for index, item in enumerate(items):
        if len(item) == 0:
            raise APIError(400, f"input[{index}] is empty; every input needs some text.", param="input")
    return items


def output_dimensions(model_id: str, profile: EmbeddingProfile, requested: int | None) -> int:
    """The vector length to return: the model's own, or a shorter prefix for Matryoshka models."""
    native = profile.dimensions
    if requested is None or requested == native:
        return native
    if not profile.matryoshka:
        raise APIError(
            400,
            f"{model_id!r} returns {native}-dimensional vectors and was not trained to be shortened "
            "(Matryoshka); leave out dimensions or set it to "
            f"{native}.",
            param="dimensions",
            code="dimensions_unsupported",
        )
    if not 1 <= requested < native:
        raise APIError(
            400, f"dimensions must be between 1 and {native} for {model_id!r}.", param="dimensions"
        )
    return requested


def _too_long(model_id: str, index: int, length: int, limit: int) -> APIError:
    return APIError(
        400,
        f"input[{index}] is {length} tokens; {model_id!r} takes at most {limit}. Shorten it, "
        'or send "truncate": true to keep its first tokens.',
        param="input",
        code="input_too_long",
    )


def _special_tokens(tokenizer: Any) -> tuple[list[int], list[int]]:
    """The ids the tokenizer puts before and after a text's own tokens ([CLS] and [SEP] for BERT)."""
    plain = list(tokenizer("a", add_special_tokens=False)["input_ids"])
    wrapped = list(tokenizer("a", add_special_tokens=True)["input_ids"])
    start = next(i for i in range(len(wrapped)) if wrapped[i : i + len(plain)] == plain)
    return wrapped[:start], wrapped[start + len(plain) :]


def tokenize(loaded: LoadedModel, items: list[Any], *, truncate: bool) -> list[list[int]]:
    """Token ids per input, special tokens included, each checked against the model's maximum.

    Token-id inputs are the model's own ids (not another model's), wrapped in its special tokens
    the way its tokenizer wraps a text."""
    assert loaded.embedding is not None, f"{loaded.model_id} is not an embedding model"
    limit = loaded.embedding.max_tokens
    tokenizer = loaded.tokenizer
    texts = [(i, item) for i, item in enumerate(items) if isinstance(item, str)]
    encoded: dict[int, list[int]] = {}
    if texts:
        ids = tokenizer(
            [t for _, t in texts],
            add_special_tokens=True,
            truncation=truncate,
            max_length=limit if truncate else None,
            verbose=False,
        )["input_ids"]
        encoded.update((i, list(row)) for (i, _), row in zip(texts, ids, strict=True))
    vocab = int(loaded.config.get("vocab_size") or len(tokenizer))
    prefix, suffix = _special_tokens(tokenizer)
    for index, item in enumerate(items):
        if isinstance(item, str):
            continue
        if any(not 0 <= t < vocab for t in item):
            raise APIError(
                400,
                f"input[{index}] has token ids outside the model's vocabulary (0..{vocab - 1}).",
                param="input",
            )
        content = item[: limit - len(prefix) - len(suffix)] if truncate else item
        encoded[index] = [*prefix, *content, *suffix]
    rows = [encoded[i] for i in range(len(items))]
    for index, row in enumerate(rows):
        if len(row) > limit:
            raise _too_long(loaded.model_id, index, len(row), limit)
    return rows


def _pool(hidden: mx.array, mask: mx.array, lengths: mx.array, pooling: str) -> mx.array:
    """sentence-transformers' pooling modes over the unpadded tokens."""
    weights = mask[:, :, None].astype(hidden.dtype)
    if pooling == "cls":
        return hidden[:, 0]
    if pooling == "max":
        return mx.where(weights > 0, hidden, mx.array(-mx.inf, dtype=hidden.dtype)).max(axis=1)
    if pooling == "lasttoken":  # right padding: the last real token sits at length - 1
        index = mx.broadcast_to((lengths - 1)[:, None, None], (hidden.shape[0], 1, hidden.shape[2]))
        return mx.take_along_axis(hidden, index, axis=1)[:, 0]
    summed = (hidden * weights).sum(axis=1)
    counts = lengths[:, None].astype(hidden.dtype)
    return summed / (mx.sqrt(counts) if pooling == "mean_sqrt_len" else counts)


def embed_batch(
    loaded: LoadedModel, rows: list[list[int]], dimensions: int
) -> np.ndarray[Any, np.dtype[np.float32]]:
    """One padded batch through the model (MLX thread): pooled, cut to `dimensions`, normalized."""
    profile = loaded.embedding
    assert profile is not None and loaded.model is not None, f"{loaded.model_id} is not loaded"
    pad = loaded.tokenizer.pad_token_id or 0
    width = max(len(r) for r in rows)
    ids = mx.array([r + [pad] * (width - len(r)) for r in rows])
    mask = mx.array([[1] * len(r) + [0] * (width - len(r)) for r in rows])
    output = loaded.model(ids, attention_mask=mask)
    if profile.pooling == "model":  # no sentence-transformers files: the architecture's own vector
        vectors = output.text_embeds
    else:
        vectors = _pool(output.last_hidden_state, mask, mask.sum(axis=1), profile.pooling)
    vectors = vectors[:, :dimensions].astype(mx.float32)
    if profile.normalize:  # also re-normalizes a shortened Matryoshka prefix
        vectors = vectors / mx.maximum(mx.linalg.norm(vectors, axis=-1, keepdims=True), 1e-12)
    mx.eval(vectors)
    return np.array(vectors, dtype=np.float32)


async def _run_batches(
    loaded: LoadedModel, rows: list[list[int]], dimensions: int
) -> np.ndarray[Any, np.dtype[np.float32]]:
    order = sorted(range(len(rows)), key=lambda i: len(rows[i]))
    vectors = np.empty((len(rows), dimensions), dtype=np.float32)
    for start in range(0, len(order), BATCH_SIZE):
        chunk = order[start : start + BATCH_SIZE]
        batch = [rows[i] for i in chunk]
        vectors[chunk] = await run_on_metal_thread(partial(embed_batch, loaded, batch, dimensions))
    return vectors


async def create_embeddings(
    model_id: str, items: list[Any], *, dimensions: int | None = None, truncate: bool = False
) -> Embeddings:
    """Embed `items` (from `input_list`) with `model_id`, leased from the pool for the request."""
    admission.acquire()
    try:
        async with get_model_pool().lease(model_id, ModelType.EMBEDDINGS) as loaded:
            assert loaded.embedding is not None, f"{model_id} has no embedding profile"
            size = output_dimensions(model_id, loaded.embedding, dimensions)
            # On the MLX thread too: a fast tokenizer with truncation set is not safe to share
            # between threads, and this serializes it with every other use of the model.
            rows = await run_on_metal_thread(lambda: tokenize(loaded, items, truncate=truncate))
            vectors = await _run_batches(loaded, rows, size)
    finally:
        admission.release()
    return Embeddings(vectors=vectors, prompt_tokens=sum(len(r) for r in rows), dimensions=size)


def encode_vector(vector: np.ndarray[Any, np.dtype[np.float32]], encoding_format: str) -> list[float] | str:
    """A vector as OpenAI sends it: floats, or base64 of its little-endian float32 bytes."""
    if encoding_format == "base64":
        return base64.b64encode(vector.astype("<f4").tobytes()).decode("ascii")
    values: list[float] = vector.tolist()
    return values
