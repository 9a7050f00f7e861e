"""The GGUF architectures we convert, each mapped to the mlx-lm model class that runs it.

Per architecture: llama.cpp's tensor names -> mlx-lm's (Hugging Face) parameter names, the
config.json built from the GGUF metadata, and what llama.cpp's convert_hf_to_gguf changed that
we undo: the llama family's Q/K row permutation (its RoPE kernel rotates adjacent pairs), and
Gemma's norm weights stored with 1 added (Gemma scales by 1 + weight; mlx-lm's RMSNorm adds it).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from mlx_server.models.gguf_file import GGUFImportError

_PROJECTIONS = {
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}
_LLAMA_LAYER = _PROJECTIONS | {"attn_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm"}
_QK_NORMS = {"attn_q_norm": "self_attn.q_norm", "attn_k_norm": "self_attn.k_norm"}
_GEMMA3_LAYER = (
    _PROJECTIONS
    | _QK_NORMS
    | {
        "attn_norm": "input_layernorm",
        "post_attention_norm": "post_attention_layernorm",
        "ffn_norm": "pre_feedforward_layernorm",
        "post_ffw_norm": "post_feedforward_layernorm",
    }
)
_TOP_LEVEL = {"token_embd": "model.embed_tokens", "output_norm": "model.norm", "output": "lm_head"}
_BLOCK = re.compile(r"blk\.(\d+)\.(\w+)\.(weight|bias)$")
_TOP = re.compile(r"(\w+)\.(weight|bias)$")

Meta = dict[str, Any]


@dataclass(frozen=True)
class Architecture:
    name: str  # general.architecture
    layer_parts: dict[str, str]
    config: Callable[[Meta, bool], dict[str, Any]]  # (metadata, tied embeddings) -> config.json
    permuted_qk: bool = False
    norm_shift: float = 0.0  # subtracted from every norm weight
    # Tokens that end a turn besides the file's eos (mlx-lm stops at any of them).
    end_tokens: tuple[str, ...] = field(default=())

    def hf_name(self, gguf_name: str) -> str:
        """mlx-lm's parameter name ("weight" part) for a GGUF tensor name."""
        if match := _BLOCK.fullmatch(gguf_name):
            layer, part, suffix = match.groups()
            if part in self.layer_parts:
                return f"model.layers.{layer}.{self.layer_parts[part]}.{suffix}"
        elif (match := _TOP.fullmatch(gguf_name)) and match.group(1) in _TOP_LEVEL:
            return f"{_TOP_LEVEL[match.group(1)]}.{match.group(2)}"
        raise GGUFImportError(f"unsupported tensor {gguf_name!r} in a {self.name} GGUF file")


def _getter(meta: Meta, arch: str) -> Callable[..., Any]:
    def get(key: str, default: Any = None) -> Any:
        value = meta.get(f"{arch}.{key}", default)
        if value is None:
            raise GGUFImportError(f"GGUF metadata lacks {arch}.{key}")
        return value

    return get


def _common(meta: Meta, arch: str, tied: bool) -> dict[str, Any]:
    get = _getter(meta, arch)
    heads = int(get("attention.head_count"))
    return {
        "hidden_size": int(get("embedding_length")),
        "num_hidden_layers": int(get("block_count")),
        "intermediate_size": int(get("feed_forward_length")),
        "num_attention_heads": heads,
        "num_key_value_heads": int(get("attention.head_count_kv", heads)),
        "rms_norm_eps": float(get("attention.layer_norm_rms_epsilon")),
        "max_position_embeddings": int(get("context_length", 2048)),
        "vocab_size": len(meta.get("tokenizer.ggml.tokens") or []) or int(get("vocab_size")),
        "tie_word_embeddings": tied,
    }


def _head_dim(meta: Meta, arch: str, config: dict[str, Any], key: str) -> int:
    return int(_getter(meta, arch)(key, config["hidden_size"] // config["num_attention_heads"]))


def _llama(meta: Meta, tied: bool) -> dict[str, Any]:
    config = _common(meta, "llama", tied)
    return config | {
        "model_type": "llama",
        "architectures": ["LlamaForCausalLM"],
        "head_dim": _head_dim(meta, "llama", config, "rope.dimension_count"),
        "rope_theta": float(_getter(meta, "llama")("rope.freq_base", 10000.0)),
    }


def _qwen2(meta: Meta, tied: bool) -> dict[str, Any]:
    return _common(meta, "qwen2", tied) | {
        "model_type": "qwen2",
        "architectures": ["Qwen2ForCausalLM"],
        "rope_theta": float(_getter(meta, "qwen2")("rope.freq_base", 1000000.0)),
    }


def _qwen3(meta: Meta, tied: bool) -> dict[str, Any]:
    config = _common(meta, "qwen3", tied)
    return config | {
        "model_type": "qwen3",
        "architectures": ["Qwen3ForCausalLM"],
        "head_dim": _head_dim(meta, "qwen3", config, "attention.key_length"),
        "rope_theta": float(_getter(meta, "qwen3")("rope.freq_base", 1000000.0)),
    }


def _gemma3(meta: Meta, tied: bool) -> dict[str, Any]:
    get = _getter(meta, "gemma3")
    config = _common(meta, "gemma3", tied)
    head_dim = _head_dim(meta, "gemma3", config, "attention.key_length")
    # Gemma 3 27B (62 layers) scales queries by hidden/heads, the others by head_dim (llama.cpp
    # does the same); llama.cpp hard-codes the local RoPE base and 5 local : 1 global layers.
    scalar = (
        config["hidden_size"] // config["num_attention_heads"]
        if config["num_hidden_layers"] == 62
        else head_dim
    )
    factor = meta.get("gemma3.rope.scaling.factor")
    scaling = {"rope_type": "linear", "factor": float(factor)} if factor and float(factor) != 1.0 else None
    return config | {
        "model_type": "gemma3_text",
        "architectures": ["Gemma3ForCausalLM"],
        "head_dim": head_dim,
        "rope_theta": float(get("rope.freq_base", 1000000.0)),
        "rope_local_base_freq": 10000.0,
        "query_pre_attn_scalar": scalar,
        "sliding_window": int(get("attention.sliding_window", 512)),
        "sliding_window_pattern": int(get("attention.sliding_window_pattern", 6)),
        "rope_scaling": scaling,
    }


ARCHITECTURES: dict[str, Architecture] = {
    "llama": Architecture("llama", _LLAMA_LAYER, _llama, permuted_qk=True),
    "qwen2": Architecture("qwen2", _LLAMA_LAYER, _qwen2),
    "qwen3": Architecture("qwen3", _LLAMA_LAYER | _QK_NORMS, _qwen3),
    "gemma3": Architecture("gemma3", _GEMMA3_LAYER, _gemma3, norm_shift=1.0, end_tokens=("<end_of_turn>",)),
}
SUPPORTED_ARCHITECTURES = tuple(ARCHITECTURES)


def architecture(meta: Meta) -> Architecture:
    name = str(meta.get("general.architecture", "<missing>"))
    if name not in ARCHITECTURES:
        raise GGUFImportError(
            f"GGUF architecture {name!r} is not supported; supported: {', '.join(SUPPORTED_ARCHITECTURES)}"
        )
    return ARCHITECTURES[name]
