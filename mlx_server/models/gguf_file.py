"""A GGUF file read with llama.cpp's own reader (the `gguf` package): metadata, tensors, and each
tensor turned into what an MLX model directory stores.

What a tensor becomes is planned per tensor from the user's choice (`auto`, `4bit`, `8bit`,
`float`) before anything is converted, so the plan and its size can be shown first:
- Q4_0, Q4_1 and Q8_0 map exactly onto MLX's affine quantization (group size 32, the same
  values): their blocks are repacked, never requantized, when the target width is their own;
- every other type `gguf.quants` reads (K-quants, Q5_0/Q5_1, IQ types, BF16...) is dequantized by
  that library and requantized with `mx.quantize` (affine, group size 32), or kept float;
- `auto` keeps each tensor's precision at the nearest MLX width that does not lose any: 2-4-bit
  types become 4-bit, 5-8-bit types 8-bit, float stays float.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, get_args

import mlx.core as mx
import numpy as np
import numpy.typing as npt
from gguf import GGMLQuantizationType, GGUFReader, LlamaFileType, ReaderTensor, quants

from mlx_server.utils.paths import file_or_directory

Quantization = Literal["auto", "4bit", "8bit", "float"]
QUANTIZATIONS: tuple[str, ...] = get_args(Quantization)
GROUP_SIZE = 32  # Q4_0/Q4_1/Q8_0's block size; requantized tensors use it too

T = GGMLQuantizationType
# The bits per stored value of each type the `gguf` package dequantizes (gguf 0.19.0); None: float.
SOURCE_BITS: dict[GGMLQuantizationType, int | None] = {
    T.F32: None, T.F16: None, T.BF16: None,
    T.Q4_0: 4, T.Q4_1: 4, T.Q5_0: 5, T.Q5_1: 5, T.Q8_0: 8,
    T.Q2_K: 2, T.Q3_K: 3, T.Q4_K: 4, T.Q5_K: 5, T.Q6_K: 6,
    T.IQ1_S: 1, T.IQ1_M: 1, T.IQ2_XXS: 2, T.IQ2_XS: 2, T.IQ2_S: 2, T.IQ3_XXS: 3, T.IQ3_S: 3,
    T.IQ4_NL: 4, T.IQ4_XS: 4, T.TQ1_0: 2, T.TQ2_0: 2, T.MXFP4: 4,
}  # fmt: skip
READABLE_TYPES = ", ".join(t.name for t in SOURCE_BITS)


class GGUFImportError(ValueError):
    """The file cannot be converted; the message says why and what to do."""


class _Reader(GGUFReader):
    """GGUFReader slicing a plain view of its memory map: numpy's memmap subclass costs ~20 µs
    per slice in Python, and the reader slices twice per vocabulary entry (4x faster on a
    152k-token vocabulary; the values read are the same)."""

    def _get(
        self, offset: int, dtype: npt.DTypeLike, count: int = 1, override_order: Any = None
    ) -> npt.NDArray[Any]:
        plain = self.__dict__.get("_plain")
        if plain is None:
            plain = self.__dict__["_plain"] = self.data.view(np.ndarray)
        count = int(count)
        end = offset + np.dtype(dtype).itemsize * count
        array = plain[offset:end].view(dtype=dtype)[:count]
        return array.view(array.dtype.newbyteorder(override_order or self.byte_order))


def _value(field: Any) -> Any:
    value = field.contents()
    return value.item() if hasattr(value, "item") else value


def open_gguf(path: Path) -> tuple[GGUFReader, dict[str, Any]]:
    """The reader and the metadata as Python values; GGUFImportError for anything not a GGUF."""
    if file_or_directory(path) != "file":
        raise GGUFImportError(f"{path}: no such file")
    try:
        reader = _Reader(path)
        meta = {name: _value(field) for name, field in reader.fields.items()}
    except Exception as exc:  # the reader raises ValueError/IndexError/KeyError on bad bytes
        raise GGUFImportError(f"{path} is not a readable GGUF file ({exc})") from exc
    return reader, meta


@dataclass(frozen=True)
class TensorPlan:
    name: str
    kind: GGMLQuantizationType
    shape: tuple[int, ...]  # numpy order: (rows, columns)
    bits: int | None  # the MLX width it is stored at; None: float

    @property
    def count(self) -> int:
        return int(np.prod(self.shape))

    def stored_bytes(self, float_bytes: int) -> int:
        if self.bits is None:
            return self.count * float_bytes
        # packed values, plus a float scale and bias per group
        return self.count * self.bits // 8 + self.count // GROUP_SIZE * 2 * float_bytes


def _target_bits(kind: GGMLQuantizationType, shape: tuple[int, ...], choice: Quantization) -> int | None:
    if len(shape) < 2 or shape[-1] % GROUP_SIZE or choice == "float":
        return None  # norms and biases stay float; MLX quantizes whole groups of a row
    if choice != "auto":
        return 4 if choice == "4bit" else 8
    source = SOURCE_BITS[kind]
    return None if source is None else 4 if source <= 4 else 8


def plan_tensors(reader: GGUFReader, choice: Quantization) -> list[TensorPlan]:
    """Every tensor's storage; GGUFImportError naming a type the `gguf` package cannot read."""
    unreadable = Counter(t.tensor_type.name for t in reader.tensors if t.tensor_type not in SOURCE_BITS)
    if unreadable:
        found = ", ".join(f"{name} ({n} tensors)" for name, n in unreadable.items())
        raise GGUFImportError(f"tensor type {found} cannot be read; readable types: {READABLE_TYPES}")
    plans = []
    for tensor in reader.tensors:
        shape = tuple(int(d) for d in reversed(tensor.shape.tolist()))
        kind = tensor.tensor_type
        plans.append(TensorPlan(tensor.name, kind, shape, _target_bits(kind, shape, choice)))
    return plans


def source_label(meta: dict[str, Any], plans: list[TensorPlan]) -> str:
    """The file's quantization as llama.cpp names it (Q4_K_M), else its most used type."""
    file_type = meta.get("general.file_type")
    if isinstance(file_type, int) and file_type in LlamaFileType._value2member_map_:
        return LlamaFileType(file_type).name.removeprefix("MOSTLY_").removeprefix("ALL_")
    weights = Counter({p.kind.name: p.count for p in plans})
    return weights.most_common(1)[0][0] if weights else "unknown"


# --- Tensor data ---


def _blocks(data: npt.NDArray[np.uint8], size: int) -> npt.NDArray[np.uint8]:
    return data.reshape(data.shape[0], -1, size)


def _halves(raw: npt.NDArray[np.uint8]) -> npt.NDArray[np.float16]:
    return np.ascontiguousarray(raw).view(np.float16)[..., 0]


def _packed(values: npt.NDArray[Any], rows: int) -> mx.array:
    return mx.array(np.ascontiguousarray(values.reshape(rows, -1)).view(np.uint32))


def _exact_q8_0(data: npt.NDArray[np.uint8]) -> tuple[mx.array, mx.array, mx.array]:
    """Q8_0 block: float16 d, 32 int8 q; value d*q = d*(q+128) - 128d (uint8, 4 per uint32)."""
    blocks = _blocks(data, 34)
    scale = _halves(blocks[..., :2])
    return _packed(blocks[..., 2:] ^ 0x80, data.shape[0]), mx.array(scale), mx.array(scale * np.float16(-128))


def _exact_q4(data: npt.NDArray[np.uint8], *, with_min: bool) -> tuple[mx.array, mx.array, mx.array]:
    """Q4_0 (d, 16 bytes: value d*(q-8)) and Q4_1 (d, m: value d*q + m): a block's first 16
    values are the low nibbles, the next 16 the high ones; MLX packs value i at bits 4i."""
    blocks = _blocks(data, 20 if with_min else 18)
    scale = _halves(blocks[..., :2])
    nibbles = blocks[..., 4:] if with_min else blocks[..., 2:]
    values = np.concatenate([nibbles & 0x0F, nibbles >> 4], axis=-1)
    packed = (values[..., 0::2] | (values[..., 1::2] << 4)).astype(np.uint8)
    bias = _halves(blocks[..., 2:4]) if with_min else scale * np.float16(-8)
    return _packed(packed, data.shape[0]), mx.array(scale), mx.array(bias)


_EXACT: dict[tuple[GGMLQuantizationType, int], Callable[[Any], tuple[mx.array, mx.array, mx.array]]] = {
    (T.Q8_0, 8): _exact_q8_0,
    (T.Q4_0, 4): lambda data: _exact_q4(data, with_min=False),
    (T.Q4_1, 4): lambda data: _exact_q4(data, with_min=True),
}


def tensor_arrays(tensor: ReaderTensor, plan: TensorPlan, float_dtype: mx.Dtype) -> dict[str, mx.array]:
    """The MLX arrays of one tensor by suffix: {"weight"} (float) or {"weight", "scales", "biases"}."""
    data = np.asarray(tensor.data)
    if plan.bits is not None and (exact := _EXACT.get((plan.kind, plan.bits))) is not None:
        weight, scales, biases = exact(data)
        return {"weight": weight, "scales": scales, "biases": biases}
    values = mx.array(quants.dequantize(data, plan.kind).reshape(plan.shape))
    if plan.bits is None:
        return {"weight": values.astype(float_dtype)}
    weight, scales, biases = mx.quantize(values, group_size=GROUP_SIZE, bits=plan.bits)
    return {"weight": weight, "scales": scales, "biases": biases}
