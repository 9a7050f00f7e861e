"""Memory figures that work on Metal and CPU builds alike (no unguarded mx.metal calls), and
the KV-cache arithmetic behind a model's practical context (the probe's `practical_max_tokens`)."""

from __future__ import annotations

import ctypes
import ctypes.util
import sys
from collections.abc import Mapping
from typing import Any

import mlx.core as mx
import psutil
from mlx.utils import tree_flatten

GB = 1024**3


def physical_memory_bytes() -> int:
    return int(psutil.virtual_memory().total)


def default_budget_bytes() -> int:
    """75 % of what the accelerator may use: Metal's recommended working set, else physical RAM.

    `mx.device_info()` has memory keys only on Metal builds, hence `.get`.
    """
    info = mx.device_info() if hasattr(mx, "device_info") else {}
    working_set = info.get("max_recommended_working_set_size")
    base = int(working_set) if isinstance(working_set, int) and working_set > 0 else physical_memory_bytes()
    return int(base * 0.75)


def active_memory_bytes() -> int:
    """Bytes MLX holds in live arrays."""
    return int(mx.get_active_memory())


def process_rss_bytes() -> int:
    return int(psutil.Process().memory_info().rss)


def activation_bytes(model: Any) -> int:
    """Bytes per value of the model's activations, hence of its KV cache: those of its first
    floating parameter (quantized layers keep float scales; float32 on CPU-only builds)."""
    for _, value in tree_flatten(model.parameters()):
        if mx.issubdtype(value.dtype, mx.floating):
            return int(value.dtype.size)
    return 2


def _positive_int(value: Any) -> int | None:
    return value if isinstance(value, int) and value > 0 else None


def kv_bytes_per_token(config: Mapping[str, Any], dtype_bytes: int) -> int | None:
    """Keys and values of one token in every layer: 2 * layers * kv_heads * head_dim * bytes;
    None when config.json lacks the shapes."""
    text = config.get("text_config")
    if isinstance(text, Mapping):  # multimodal models keep the language model's shapes there
        config = text
    layers = config.get("num_hidden_layers") or config.get("n_layer") or config.get("num_layers")
    layers = _positive_int(layers)
    heads = _positive_int(config.get("num_attention_heads") or config.get("n_head"))
    kv_heads = _positive_int(config.get("num_key_value_heads")) or heads
    hidden = _positive_int(config.get("hidden_size"))
    head_dim = _positive_int(config.get("head_dim")) or (hidden // heads if hidden and heads else None)
    if layers is None or kv_heads is None or not head_dim:
        return None
    return 2 * layers * kv_heads * head_dim * dtype_bytes


def practical_max_tokens(
    config: Mapping[str, Any], *, budget_bytes: int, weights_bytes: int, dtype_bytes: int
) -> int | None:
    """Tokens whose KV cache fits in the pool's budget beside the weights, capped by the context."""
    context = _positive_int(config.get("max_position_embeddings") or config.get("max_seq_len"))
    per_token = kv_bytes_per_token(config, dtype_bytes)
    if per_token is None:
        return context
    fits = max(0, budget_bytes - weights_bytes) // per_token
    return min(fits, context) if context is not None else fits


_LIBC = ctypes.CDLL(ctypes.util.find_library("c")) if sys.platform.startswith("linux") else None


def release_free_heap() -> None:
    """Hand the C heap's free pages back to the OS (glibc's malloc_trim), so an unloaded model
    shows in the process's RSS too; macOS's allocator returns them itself."""
    if _LIBC is not None and hasattr(_LIBC, "malloc_trim"):
        _LIBC.malloc_trim(0)
