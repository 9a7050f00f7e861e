"""Convert a llama.cpp GGUF file into an MLX model directory `mlx_lm.load()` accepts.

The file is read with llama.cpp's own reader (`gguf_file`); each tensor is stored as its plan
says (exact repacking, requantization or float; see gguf_file.py), renamed to mlx-lm's names
for its architecture (`gguf_arch`), with what llama.cpp's converter changed undone; config.json
carries the per-module bit widths, and the tokenizer is rebuilt from the metadata
(`gguf_tokenizer`).

`inspect_gguf` gives the same plan without converting: architecture, quantization mix,
parameter count and the size the MLX copy will take, shown before an import starts.

The output is written to a temporary sibling directory and renamed into place, so a failed
conversion never leaves a half-written model behind.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import mlx.core as mx
from gguf import GGUFReader

from mlx_server.models.gguf_arch import SUPPORTED_ARCHITECTURES, Architecture, architecture
from mlx_server.models.gguf_file import (
    GROUP_SIZE,
    QUANTIZATIONS,
    GGUFImportError,
    Quantization,
    TensorPlan,
    open_gguf,
    plan_tensors,
    source_label,
    tensor_arrays,
)
from mlx_server.models.gguf_tokenizer import TokenizerImportError, write_tokenizer

__all__ = ["SUPPORTED_ARCHITECTURES", "ConvertedModel", "GGUFImportError", "GGUFInfo", "convert_gguf"]


@dataclass(frozen=True)
class ConvertedModel:
    path: Path
    architecture: str
    name: str | None
    quantization_bits: int | None
    size_bytes: int
    source_quantization: str | None = None


@dataclass(frozen=True)
class GGUFInfo:
    """What a GGUF file holds and what importing it with `quantization` will store."""

    path: Path
    architecture: str
    name: str | None
    source_quantization: str  # llama.cpp's name for the file's type, e.g. Q4_K_M
    type_counts: dict[str, tuple[int, int]]  # tensor type -> (tensors, parameters)
    parameters: int
    file_bytes: int
    quantization: Quantization
    stored_counts: dict[str, int]  # "4-bit" / "8-bit" / "float" -> parameters stored so
    planned_bytes: int


def _unpermute_rows(array: mx.array, n_heads: int) -> mx.array:
    """Inverse of llama.cpp's `permute`: rows (h, 2, d/2) were stored as (h, d/2, 2)."""
    rows = array.shape[0]
    return (
        array.reshape(n_heads, rows // n_heads // 2, 2, *array.shape[1:]).swapaxes(1, 2).reshape(array.shape)
    )


def default_float_dtype() -> mx.Dtype:
    # On a CPU-only MLX build half-precision matmuls run 10-40x slower than float32.
    return mx.float16 if mx.metal.is_available() else mx.float32


def _checked_choice(quantization: str) -> Quantization:
    if quantization not in QUANTIZATIONS:
        raise GGUFImportError(
            f"quantization {quantization!r} is unknown; use one of {', '.join(QUANTIZATIONS)}"
        )
    return quantization  # type: ignore[return-value]


def _stored_label(plan: TensorPlan) -> str:
    return "float" if plan.bits is None else f"{plan.bits}-bit"


def inspect_gguf(path: Path, quantization: str = "auto") -> GGUFInfo:
    """The file's architecture, quantization mix and parameters, and the import's plan and size."""
    choice = _checked_choice(quantization)
    reader, meta = open_gguf(path)
    arch = architecture(meta)
    plans = plan_tensors(reader, choice)
    for plan in plans:
        arch.hf_name(plan.name)  # an unknown tensor fails here, before any import
    types: dict[str, tuple[int, int]] = {}
    for plan in plans:
        tensors, params = types.get(plan.kind.name, (0, 0))
        types[plan.kind.name] = (tensors + 1, params + plan.count)
    stored: Counter[str] = Counter()
    for plan in plans:
        stored[_stored_label(plan)] += plan.count
    float_bytes = default_float_dtype().size
    name = meta.get("general.name")
    return GGUFInfo(
        path=path,
        architecture=arch.name,
        name=str(name) if name else None,
        source_quantization=source_label(meta, plans),
        type_counts=dict(sorted(types.items(), key=lambda item: -item[1][1])),
        parameters=sum(plan.count for plan in plans),
        file_bytes=path.stat().st_size,
        quantization=choice,
        stored_counts={label: stored[label] for label in ("4-bit", "8-bit", "float") if label in stored},
        planned_bytes=sum(plan.stored_bytes(float_bytes) for plan in plans),
    )


def _convert_weights(
    reader: GGUFReader,
    plans: list[TensorPlan],
    arch: Architecture,
    config: dict[str, Any],
    float_dtype: mx.Dtype,
) -> tuple[dict[str, mx.array], dict[str, Any] | None]:
    out: dict[str, mx.array] = {}
    module_bits: dict[str, int] = {}
    for tensor, plan in zip(reader.tensors, plans, strict=True):
        name = arch.hf_name(plan.name)
        module, _, kind = name.rpartition(".")
        arrays = tensor_arrays(tensor, plan, float_dtype)
        if kind == "bias":  # 1-D: always float
            arrays = {"bias": arrays["weight"]}
        for suffix, array in arrays.items():
            if arch.permuted_qk and module.endswith(("self_attn.q_proj", "self_attn.k_proj")):
                heads = config["num_attention_heads" if module.endswith("q_proj") else "num_key_value_heads"]
                array = _unpermute_rows(array, heads)
            if arch.norm_shift and module.endswith("norm"):
                array = array - arch.norm_shift
            if mx.issubdtype(array.dtype, mx.floating):  # scales and biases too
                array = array.astype(float_dtype)
            out[f"{module}.{suffix}"] = array
            mx.eval(array)  # one tensor at a time: dequantized copies do not pile up
        if plan.bits is not None:
            module_bits[module] = plan.bits
    if not module_bits:
        return out, None
    common_bits = Counter(module_bits.values()).most_common(1)[0][0]
    quantization: dict[str, Any] = {"group_size": GROUP_SIZE, "bits": common_bits, "mode": "affine"}
    for module, bits in sorted(module_bits.items()):
        if bits != common_bits:
            quantization[module] = {"group_size": GROUP_SIZE, "bits": bits, "mode": "affine"}
    return out, quantization


def _end_token_ids(meta: dict[str, Any], arch: Architecture, eos: int | None) -> list[int] | int | None:
    tokens = list(meta.get("tokenizer.ggml.tokens") or [])
    extra = [tokens.index(t) for t in arch.end_tokens if t in tokens]
    ids = list(dict.fromkeys(([eos] if eos is not None else []) + extra))
    return ids if len(ids) > 1 else eos


def convert_gguf(
    gguf_path: Path, out_dir: Path, *, quantization: str = "auto", float_dtype: mx.Dtype | None = None
) -> ConvertedModel:
    """Convert `gguf_path` into a new model directory `out_dir` (must not exist)."""
    if out_dir.exists():
        raise GGUFImportError(f"{out_dir} already exists; choose another model id")
    choice = _checked_choice(quantization)
    reader, meta = open_gguf(gguf_path)
    arch = architecture(meta)
    plans = plan_tensors(reader, choice)
    config = arch.config(meta, not any(plan.name == "output.weight" for plan in plans))
    converted, quantization_config = _convert_weights(
        reader, plans, arch, config, float_dtype or default_float_dtype()
    )
    if quantization_config:
        config["quantization"] = quantization_config

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
        end_ids = _end_token_ids(meta, arch, special_ids.get("eos_token_id"))
        if end_ids is not None:
            generation = {"eos_token_id": end_ids}
            (staging / "generation_config.json").write_text(json.dumps(generation, indent=2))
        staging.rename(out_dir)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    size = sum(f.stat().st_size for f in out_dir.iterdir() if f.is_file())
    name = meta.get("general.name")
    return ConvertedModel(
        path=out_dir,
        architecture=arch.name,
        name=str(name) if name else None,
        quantization_bits=quantization_config["bits"] if quantization_config else None,
        size_bytes=size,
        source_quantization=source_label(meta, plans),
    )
