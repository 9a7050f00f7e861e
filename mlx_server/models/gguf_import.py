"""Convert a llama.cpp GGUF file into an MLX model directory `mlx_lm.load()` accepts.

`mx.load(path, return_metadata=True)` already decodes GGUF: Q4_0, Q4_1 and Q8_0
tensors come back as MLX affine triplets (weight, scales, biases; group size 32),
F16/F32 tensors as plain arrays. What is left for us:

* rename llama.cpp tensor names to mlx-lm's (Hugging Face) parameter names;
* undo llama.cpp's row permutation of the Q and K projections, which
  convert_hf_to_gguf applies so its RoPE kernel can rotate adjacent pairs;
* write `config.json` with the per-module bit widths (token_embd is often 8-bit
  inside a 4-bit file);
* rebuild the tokenizer (see `gguf_tokenizer`).

The output is written to a temporary sibling directory and renamed into place,
so a failed conversion never leaves a half-written model behind.
"""

from __future__ import annotations

import json
import re
import shutil
import tempfile
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import mlx.core as mx

from mlx_server.models.gguf_tokenizer import TokenizerImportError, write_tokenizer

SUPPORTED_ARCHITECTURES = ("llama",)
GGUF_GROUP_SIZE = 32  # every GGUF block format MLX decodes (Q4_0, Q4_1, Q8_0) uses 32

_LAYER_PARTS = {
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "attn_norm": "input_layernorm",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
    "ffn_norm": "post_attention_layernorm",
}
_TOP_LEVEL = {"token_embd": "model.embed_tokens", "output_norm": "model.norm", "output": "lm_head"}
_BLOCK = re.compile(r"blk\.(\d+)\.(\w+)\.(weight|scales|biases|bias)$")
_TOP = re.compile(r"(\w+)\.(weight|scales|biases|bias)$")


class GGUFImportError(ValueError):
    """The file cannot be converted; the message says why and what to do."""


@dataclass(frozen=True)
class ConvertedModel:
    path: Path
    architecture: str
    name: str | None
    quantization_bits: int | None
    size_bytes: int


def _scalar(value: Any) -> Any:
    return value.item() if hasattr(value, "item") else value


def read_gguf(path: Path) -> tuple[dict[str, mx.array], dict[str, Any]]:
    if not path.is_file():
        raise GGUFImportError(f"{path}: no such file")
    try:
        weights, meta = mx.load(str(path), return_metadata=True)
    except Exception as exc:  # mlx raises RuntimeError/ValueError with gguflib's message
        raise GGUFImportError(f"{path} is not a readable GGUF file ({exc})") from exc
    if not isinstance(weights, dict) or not isinstance(meta, dict):
        raise GGUFImportError(f"{path} is not a GGUF model file")
    return weights, meta


def _hf_name(gguf_name: str) -> str:
    if match := _BLOCK.fullmatch(gguf_name):
        layer, part, suffix = match.groups()
        if part not in _LAYER_PARTS:
            raise GGUFImportError(f"unsupported tensor {gguf_name!r} in a llama GGUF file")
        return f"model.layers.{layer}.{_LAYER_PARTS[part]}.{suffix}"
    if (match := _TOP.fullmatch(gguf_name)) and match.group(1) in _TOP_LEVEL:
        return f"{_TOP_LEVEL[match.group(1)]}.{match.group(2)}"
    raise GGUFImportError(f"unsupported tensor {gguf_name!r} in a llama GGUF file")


def _unpermute_rows(array: mx.array, n_heads: int) -> mx.array:
    """Inverse of llama.cpp's `permute`: rows (h, 2, d/2) were stored as (h, d/2, 2)."""
    rows = array.shape[0]
    return (
        array.reshape(n_heads, rows // n_heads // 2, 2, *array.shape[1:]).swapaxes(1, 2).reshape(array.shape)
    )


def _bits_of(weight: mx.array, scales: mx.array) -> int:
    in_features = scales.shape[-1] * GGUF_GROUP_SIZE
    return weight.shape[-1] * 32 // in_features


def _config(meta: dict[str, Any], arch: str, tied: bool) -> dict[str, Any]:
    def get(key: str, default: Any = None) -> Any:
        value = meta.get(f"{arch}.{key}", default)
        if value is None:
            raise GGUFImportError(f"GGUF metadata lacks {arch}.{key}")
        return _scalar(value)

    heads = int(get("attention.head_count"))
    hidden = int(get("embedding_length"))
    return {
        "model_type": "llama",
        "architectures": ["LlamaForCausalLM"],
        "hidden_size": hidden,
        "num_hidden_layers": int(get("block_count")),
        "intermediate_size": int(get("feed_forward_length")),
        "num_attention_heads": heads,
        "num_key_value_heads": int(get("attention.head_count_kv", heads)),
        "head_dim": int(get("rope.dimension_count", hidden // heads)),
        "rms_norm_eps": float(get("attention.layer_norm_rms_epsilon")),
        "rope_theta": float(get("rope.freq_base", 10000.0)),
        "max_position_embeddings": int(get("context_length", 2048)),
        "vocab_size": len(meta.get("tokenizer.ggml.tokens") or []) or int(get("vocab_size")),
        "tie_word_embeddings": tied,
    }


def _convert_weights(
    weights: dict[str, mx.array], config: dict[str, Any], float_dtype: mx.Dtype
) -> tuple[dict[str, mx.array], dict[str, Any] | None]:
    out: dict[str, mx.array] = {}
    for gguf_name, array in weights.items():
        name = _hf_name(gguf_name)
        if ".self_attn.q_proj." in name:
            array = _unpermute_rows(array, config["num_attention_heads"])
        elif ".self_attn.k_proj." in name:
            array = _unpermute_rows(array, config["num_key_value_heads"])
        if mx.issubdtype(array.dtype, mx.floating):
            array = array.astype(float_dtype)
        out[name] = array

    module_bits = {
        name.removesuffix(".scales"): _bits_of(out[name.replace(".scales", ".weight")], out[name])
        for name in out
        if name.endswith(".scales")
    }
    if not module_bits:
        return out, None
    common_bits = Counter(module_bits.values()).most_common(1)[0][0]
    quantization: dict[str, Any] = {"group_size": GGUF_GROUP_SIZE, "bits": common_bits, "mode": "affine"}
    for module, bits in sorted(module_bits.items()):
        if bits != common_bits:
            quantization[module] = {"group_size": GGUF_GROUP_SIZE, "bits": bits, "mode": "affine"}
    return out, quantization


def default_float_dtype() -> mx.Dtype:
    # On a CPU-only MLX build half-precision matmuls run 10-40x slower than float32.
    return mx.float16 if mx.metal.is_available() else mx.float32


def convert_gguf(gguf_path: Path, out_dir: Path, *, float_dtype: mx.Dtype | None = None) -> ConvertedModel:
    """Convert `gguf_path` into a new model directory `out_dir` (must not exist)."""
    if out_dir.exists():
        raise GGUFImportError(f"{out_dir} already exists; choose another model id")
    weights, meta = read_gguf(gguf_path)
    arch = str(meta.get("general.architecture", "<missing>"))
    if arch not in SUPPORTED_ARCHITECTURES:
        raise GGUFImportError(
            f"GGUF architecture {arch!r} is not supported; supported: {', '.join(SUPPORTED_ARCHITECTURES)}"
        )
    config = _config(meta, arch, tied="output.weight" not in weights)
    converted, quantization = _convert_weights(weights, config, float_dtype or default_float_dtype())
    if quantization:
        config["quantization"] = quantization

    out_dir.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.", dir=out_dir.parent))
    try:
        try:
            special_ids = write_tokenizer(meta, staging, max_length=config["max_position_embeddings"])
        except TokenizerImportError as exc:
            raise GGUFImportError(str(exc)) from exc
        config.update({k: v for k, v in special_ids.items() if v is not None})
        mx.save_safetensors(str(staging / "model.safetensors"), converted, metadata={"format": "mlx"})
        (staging / "config.json").write_text(json.dumps(config, indent=2))
        if special_ids.get("eos_token_id") is not None:
            generation = {"eos_token_id": special_ids["eos_token_id"]}
            (staging / "generation_config.json").write_text(json.dumps(generation, indent=2))
        staging.rename(out_dir)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    size = sum(f.stat().st_size for f in out_dir.iterdir() if f.is_file())
    name = meta.get("general.name")
    return ConvertedModel(
        path=out_dir,
        architecture=arch,
        name=str(name) if name else None,
        quantization_bits=quantization["bits"] if quantization else None,
        size_bytes=size,
    )
