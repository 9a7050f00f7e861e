"""Helpers shared by tests (fixtures live in conftest.py)."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

import mlx.core as mx
import numpy as np


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def copy_truncated(source: Path, target: Path, size: int) -> Path:
    with source.open("rb") as src, target.open("wb") as dst:
        dst.write(src.read(size))
    return target


def llama_cpp_permute(weight: np.ndarray, n_heads: int) -> np.ndarray:
    """llama.cpp's convert_hf_to_gguf row permutation of Q/K (as documented there)."""
    rows = weight.shape[0]
    return (
        weight.reshape(n_heads, 2, rows // n_heads // 2, *weight.shape[1:])
        .swapaxes(1, 2)
        .reshape(weight.shape)
    )


def write_tiny_llama_gguf(path: Path, hf_weights: dict[str, np.ndarray], meta: dict[str, Any]) -> Path:
    """Write a float32 llama GGUF from Hugging Face-named weights, the way llama.cpp names them."""
    heads, kv_heads = int(meta["llama.attention.head_count"]), int(meta["llama.attention.head_count_kv"])
    parts = {
        "self_attn.q_proj": "attn_q",
        "self_attn.k_proj": "attn_k",
        "self_attn.v_proj": "attn_v",
        "self_attn.o_proj": "attn_output",
        "input_layernorm": "attn_norm",
        "mlp.gate_proj": "ffn_gate",
        "mlp.up_proj": "ffn_up",
        "mlp.down_proj": "ffn_down",
        "post_attention_layernorm": "ffn_norm",
    }
    top = {"model.embed_tokens": "token_embd", "model.norm": "output_norm", "lm_head": "output"}
    arrays: dict[str, mx.array] = {}
    for name, value in hf_weights.items():
        module = name.removesuffix(".weight")
        if module in top:
            gguf = top[module]
        else:
            _, _, layer, *rest = module.split(".")
            gguf = f"blk.{layer}.{parts['.'.join(rest)]}"
        if module.endswith("q_proj"):
            value = llama_cpp_permute(value, heads)
        elif module.endswith("k_proj"):
            value = llama_cpp_permute(value, kv_heads)
        arrays[f"{gguf}.weight"] = mx.array(value)
    mx.save_gguf(str(path), arrays, meta)
    return path
