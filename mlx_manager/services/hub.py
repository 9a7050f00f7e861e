"""Hugging Face hub: where it is, searching it, and whether a model fits the memory budget.

The fit estimate is weights + the KV cache of a default context (4096 tokens), compared with the
model pool's budget. Weights come from the listing's safetensors dtype counts, the KV cache from
the config's layer shapes when the listing carries them, else from a fixed share of the weights.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

import httpx2
from huggingface_hub import HfApi, get_session
from huggingface_hub.errors import (
    GatedRepoError,
    HfHubHTTPError,
    OfflineModeIsEnabled,
    RepositoryNotFoundError,
    RevisionNotFoundError,
)
from huggingface_hub.hf_api import ExpandModelProperty_T, ModelInfo
from huggingface_hub.utils import build_hf_headers, hf_raise_for_status
from sqlmodel import Session

from mlx_manager.services.refusals import Refusal
from mlx_manager.services.settings_store import HUB_CACHE_DIR, HUB_ENDPOINT, HUB_TOKEN, get_setting
from mlx_server.facade import ModelStoreError, __version__, memory_budget_bytes, validate_model_id

DEFAULT_AUTHOR = "mlx-community"
DEFAULT_CONTEXT_TOKENS = 4096
SEARCH_LIMIT = 30
SearchSort = Literal["downloads", "likes", "recent"]
# The model type filter, as the hub's pipeline tags: embedding models carry either of two,
# vision chat models (Qwen2.5-VL, Gemma 3, SmolVLM...) image-text-to-text, Whisper & co.
# automatic-speech-recognition, Kokoro & co. text-to-speech, rerankers (cross-encoders)
# text-ranking (older ones text-classification only, which would bring every classifier).
SearchType = Literal["", "text-gen", "vision", "embeddings", "stt", "tts", "rerank"]
PIPELINE_TAGS: dict[SearchType, tuple[str | None, ...]] = {
    "": (None,),
    "text-gen": ("text-generation",),
    "vision": ("image-text-to-text",),
    "embeddings": ("feature-extraction", "sentence-similarity"),
    "stt": ("automatic-speech-recognition",),
    "tts": ("text-to-speech",),
    "rerank": ("text-ranking",),
}
# The hub listing's sort keys.
SORTS: dict[SearchSort, str] = {"downloads": "downloads", "likes": "likes", "recent": "lastModified"}
# A search is one request that fails fast: huggingface_hub's list_models retries a refused
# connection 5 times with backoff (~23 s) before failing, and a user waits on a search.
SEARCH_TIMEOUT = httpx2.Timeout(15.0, connect=3.0)
SEARCH_EXPAND: list[ExpandModelProperty_T] = [
    "downloads",
    "likes",
    "lastModified",
    "tags",
    "gated",
    "safetensors",
    "usedStorage",
    "config",
]
# Without layer shapes, the KV cache of 4096 tokens is taken as this share of the weights:
# 4-bit 7-8B models with grouped-query attention sit between 5 % and 13 %.
KV_FALLBACK_FRACTION = 0.15
# Bytes per value of each safetensors dtype the hub reports.
DTYPE_BYTES = {"F64": 8, "I64": 8, "U64": 8, "F32": 4, "I32": 4, "U32": 4, "BF16": 2, "F16": 2, "I16": 2}
DTYPE_BYTES |= {"U16": 2, "I8": 1, "U8": 1, "BOOL": 1, "F8_E4M3": 1, "F8_E5M2": 1}


class HubError(Refusal):
    """The hub refused or could not be reached; `message` says what to do, `status_code` fits HTTP."""


@dataclass(frozen=True)
class HubConfig:
    endpoint: str
    token: str | None
    cache_dir: Path

    def api(self) -> HfApi:
        return HfApi(
            endpoint=self.endpoint, token=self.token, library_name="mlx-manager", library_version=__version__
        )

    def headers(self) -> dict[str, str]:
        """What HfApi sends: the user agent and, when set, the token."""
        return build_hf_headers(token=self.token, library_name="mlx-manager", library_version=__version__)


def load_hub_config(session: Session) -> HubConfig:
    return HubConfig(
        endpoint=get_setting(session, HUB_ENDPOINT).rstrip("/"),
        token=get_setting(session, HUB_TOKEN),
        cache_dir=Path(get_setting(session, HUB_CACHE_DIR)).expanduser(),
    )


@dataclass(frozen=True)
class MemoryEstimate:
    weights_bytes: int
    kv_cache_bytes: int
    budget_bytes: int
    # False: the KV cache is the fallback share of the weights, not computed from layer shapes.
    kv_from_config: bool

    @property
    def total_bytes(self) -> int:
        return self.weights_bytes + self.kv_cache_bytes

    @property
    def fits(self) -> bool:
        return self.total_bytes <= self.budget_bytes


@dataclass(frozen=True)
class HubModel:
    """One search result."""

    repo_id: str
    downloads: int
    likes: int
    last_modified: datetime | None
    size_bytes: int | None
    quantization_bits: int | None
    gated: bool
    estimate: MemoryEstimate | None


def kv_cache_bytes(
    *, layers: int, kv_heads: int, head_dim: int, context_tokens: int, value_bytes: int = 2
) -> int:
    """Keys and values (2) for every layer, KV head and position, in float16 (2 bytes)."""
    return 2 * layers * kv_heads * head_dim * context_tokens * value_bytes


def kv_cache_bytes_from_config(config: Mapping[str, Any], context_tokens: int) -> int | None:
    """The KV cache from a config.json's shapes; None when they are missing."""
    text = config.get("text_config")
    if isinstance(text, Mapping):  # multimodal models keep the language model's shapes there
        config = text

    def first_int(*keys: str) -> int | None:
        values = [config.get(key) for key in keys]
        return next((v for v in values if isinstance(v, int) and v > 0), None)

    layers = first_int("num_hidden_layers", "n_layer", "num_layers")
    heads = first_int("num_attention_heads", "n_head")
    kv_heads = first_int("num_key_value_heads") or heads
    head_dim = first_int("head_dim")
    hidden = first_int("hidden_size", "n_embd")
    if head_dim is None and hidden and heads:
        head_dim = hidden // heads
    if not (layers and kv_heads and head_dim):
        return None
    return kv_cache_bytes(layers=layers, kv_heads=kv_heads, head_dim=head_dim, context_tokens=context_tokens)


def estimate_memory(
    weights_bytes: int,
    config: Mapping[str, Any] | None,
    budget_bytes: int,
    context_tokens: int = DEFAULT_CONTEXT_TOKENS,
) -> MemoryEstimate:
    """Weights plus the KV cache of `context_tokens`, against the pool's budget."""
    kv = kv_cache_bytes_from_config(config, context_tokens) if config else None
    return MemoryEstimate(
        weights_bytes=weights_bytes,
        kv_cache_bytes=kv if kv is not None else int(weights_bytes * KV_FALLBACK_FRACTION),
        budget_bytes=budget_bytes,
        kv_from_config=kv is not None,
    )


def weights_bytes(parameters: Mapping[str, int]) -> int:
    """Bytes of the safetensors weights from the hub's parameter count per dtype."""
    return sum(count * DTYPE_BYTES.get(dtype.upper(), 2) for dtype, count in parameters.items())


def config_quantization_bits(config: Mapping[str, Any] | None) -> int | None:
    """Bits per weight from a config.json's `quantization` (MLX) or `quantization_config` block."""
    for key in ("quantization", "quantization_config"):
        block = (config or {}).get(key)
        if isinstance(block, Mapping) and isinstance(block.get("bits"), int):
            return int(block["bits"])
    return None


def quantization_bits(repo_id: str, tags: list[str], config: Mapping[str, Any] | None) -> int | None:
    """Bits per weight: the config's `quantization` block, else a "4-bit" tag, else the name."""
    bits = config_quantization_bits(config)
    if bits is not None:
        return bits
    for text in [*tags, repo_id.rsplit("/", 1)[-1]]:
        match = re.search(r"(?<![0-9])(\d{1,2})-?bits?\b", text, re.IGNORECASE)
        if match:
            return int(match.group(1))
    return None


def _result(info: ModelInfo, budget_bytes: int) -> HubModel:
    size: int | None = None
    if info.safetensors is not None and info.safetensors.parameters:
        size = weights_bytes(info.safetensors.parameters)
    elif info.used_storage:
        size = int(info.used_storage)
    return HubModel(
        repo_id=info.id,
        downloads=info.downloads or 0,
        likes=info.likes or 0,
        last_modified=info.last_modified,
        size_bytes=size,
        quantization_bits=quantization_bits(info.id, info.tags or [], info.config),
        gated=bool(info.gated),
        estimate=estimate_memory(size, info.config, budget_bytes) if size else None,
    )


def search_models(
    config: HubConfig,
    *,
    query: str,
    author: str = DEFAULT_AUTHOR,
    sort: SearchSort = "downloads",
    model_type: SearchType = "",
    budget_bytes: int,
    limit: int = SEARCH_LIMIT,
) -> list[HubModel]:
    """Models on the hub matching `query` (by `author` unless empty) and of `model_type` (any
    when empty), best first by `sort`."""
    try:
        found: dict[str, HubModel] = {}
        for tag in PIPELINE_TAGS[model_type]:  # one listing per pipeline tag, merged
            params = {"search": query.strip(), "author": author.strip(), "pipeline_tag": tag or ""}
            params = {key: value for key, value in params.items() if value}
            infos = _list_models(config, {**params, "sort": SORTS[sort], "limit": limit})
            found.update((info.id, _result(info, budget_bytes)) for info in infos if info.id not in found)
        results = list(found.values())
        if len(PIPELINE_TAGS[model_type]) > 1:
            results.sort(key=lambda m: _sort_key(m, sort), reverse=True)
        return results[:limit]
    except Exception as exc:
        error = hub_error(exc, config.endpoint)
        if error is None:
            raise
        raise error from exc


def _list_models(config: HubConfig, params: dict[str, Any]) -> list[ModelInfo]:
    """One page of the hub's model listing, asked once (GET /api/models, as list_models does)."""
    response = get_session().get(
        f"{config.endpoint}/api/models",
        params={**params, "expand": SEARCH_EXPAND},
        headers=config.headers(),
        timeout=SEARCH_TIMEOUT,
    )
    hf_raise_for_status(response)
    # ModelInfo(**item) is how list_models builds its results; its __init__ is untyped.
    return [ModelInfo(**item) for item in response.json()]  # type: ignore[no-untyped-call]


def _sort_key(model: HubModel, sort: SearchSort) -> float:
    if sort == "recent":
        return model.last_modified.timestamp() if model.last_modified else 0.0
    return float(model.likes if sort == "likes" else model.downloads)


def search_results(
    session: Session, *, query: str, sort: SearchSort, author: str, model_type: SearchType = ""
) -> tuple[dict[str, Any], int]:
    """What the hub results show (partials/hub_results.html), and the status code: the hub's
    failure is 502 (or its status) with the reason."""
    budget = memory_budget_bytes()
    context: dict[str, Any] = {"query": query, "sort": sort, "author": author, "budget_bytes": budget}
    context["model_type"] = model_type
    context["context_tokens"] = DEFAULT_CONTEXT_TOKENS
    try:
        config = load_hub_config(session)
        context["results"] = search_models(
            config, query=query, author=author, sort=sort, model_type=model_type, budget_bytes=budget
        )
    except HubError as exc:
        context["error"] = exc.message
        return context, exc.status_code
    return context, 200


def check_repo_id(repo_id: str) -> str:
    """A hub model id ("owner/name") usable as our model id, or HubError 400."""
    repo_id = repo_id.strip()
    try:
        if repo_id.count("/") != 1:
            raise ModelStoreError(
                "use the hub's 'owner/name' form, e.g. mlx-community/SmolLM2-135M-Instruct-4bit"
            )
        validate_model_id(repo_id)
    except ModelStoreError as exc:
        raise HubError(400, f"{repo_id!r} is not a hub model id: {exc}") from exc
    return repo_id


def check_repo(config: HubConfig, repo_id: str, revision: str) -> None:
    """Ask the hub whether `repo_id` at `revision` exists and is readable; HubError if not."""
    try:
        config.api().model_info(repo_id, revision=revision)
    except Exception as exc:
        error = hub_error(exc, config.endpoint, repo_id, revision)
        if error is None:
            raise
        raise error from exc


def hub_error(exc: Exception, endpoint: str, repo_id: str = "", revision: str = "") -> HubError | None:
    """The user-facing HubError for a huggingface_hub failure; None for anything else."""
    if isinstance(exc, HubError):
        return exc
    if isinstance(exc, GatedRepoError):
        return HubError(
            403,
            f"{repo_id} is gated: accept its conditions on its hub page, then set a hub token "
            "that has access in Settings.",
        )
    if isinstance(exc, RepositoryNotFoundError):
        return HubError(
            404,
            f"The hub at {endpoint} has no model {repo_id!r}. Check the id, or set a hub token in "
            "Settings if the model is private.",
        )
    if isinstance(exc, RevisionNotFoundError):
        return HubError(
            404, f"{repo_id} has no revision {revision!r}; use a branch, tag or commit that exists."
        )
    if isinstance(exc, HfHubHTTPError):
        status = exc.response.status_code if exc.response is not None else "an error"
        return HubError(502, f"The hub at {endpoint} answered {status}: {exc}. Try again later.")
    if isinstance(exc, (httpx2.TransportError, OfflineModeIsEnabled)):
        return HubError(
            502,
            f"Cannot reach the hub at {endpoint} ({type(exc).__name__}: {exc}). Check the network, "
            "or the hub endpoint in Settings.",
        )
    return None
