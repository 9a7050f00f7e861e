"""Text models as float32 on a CPU device with a fast BLAS.

MLX's CPU quantized matmul runs at ~2 GFLOP/s on the 2-core test machine, while float32
products go through OpenBLAS (utils/cpu_blas.py) at ~200: loaded dequantized, SmolLM2-135M
prefills 27x and decodes 2.2x faster, for about 4x the weight memory. The values are the stored
ones exactly dequantized, so the model computes the same function. On Metal, without a fast
BLAS, or above `cpu_float_weights_max_mb`, models load as stored.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

from mlx_server.config import get_settings
from mlx_server.utils.cpu_blas import fast_cpu_blas
from mlx_server.utils.huge_pages import advise_huge_pages


def _tensors(path: Path) -> dict[str, dict[str, Any]]:
    """Name -> {dtype, shape} from the JSON headers of the directory's safetensors files."""
    found: dict[str, dict[str, Any]] = {}
    for file in sorted(path.glob("*.safetensors")):
        with file.open("rb") as f:
            (length,) = struct.unpack("<Q", f.read(8))
            header = json.loads(f.read(length))
        found.update({k: v for k, v in header.items() if k != "__metadata__"})
    return found


def safetensors_headers(path: Path) -> dict[str, dict[str, Any]]:
    """Tensor name -> {dtype, shape, data_offsets} of the directory's weights (no weights read)."""
    return _tensors(path)


def _float32_bytes(path: Path, config: dict[str, Any]) -> int:
    """The weights' size once quantized layers are float32 (every tensor counted as float32)."""
    return parameter_count(path, config) * 4


def weight_dtypes(path: Path) -> dict[str, int]:
    """Safetensors dtype ("F32", "BF16", "U32", ...) -> how many tensors are stored in it."""
    counts: dict[str, int] = {}
    for info in _tensors(path).values():
        counts[str(info["dtype"])] = counts.get(str(info["dtype"]), 0) + 1
    return counts


def parameter_count(path: Path, config: dict[str, Any]) -> int:
    """The model's parameters from its safetensors headers; a quantized layer counts the values
    its packed weight holds (groups x group size), not its uint32 words, scales or biases."""
    quantization = config.get("quantization") or {}
    tensors = _tensors(path)
    total = 0
    for name, info in tensors.items():
        module, _, kind = name.rpartition(".")
        count = 1
        for dim in info["shape"]:
            count *= int(dim)
        if f"{module}.scales" in tensors and kind in ("scales", "biases"):
            continue  # folded into the weight below
        if f"{module}.scales" in tensors and kind == "weight":
            override = quantization.get(module)
            layer = override if isinstance(override, dict) else quantization
            groups = 1
            for dim in tensors[f"{module}.scales"]["shape"]:
                groups *= int(dim)
            count = groups * int(layer.get("group_size", 64))
        total += count
    return total


def _dequantized_bytes(path: Path, config: dict[str, Any]) -> int | None:
    """The float32 size when this text model loads dequantized, else None."""
    import mlx.core as mx

    if not config.get("quantization") or mx.default_device() != mx.cpu or not fast_cpu_blas():
        return None
    size = _float32_bytes(path, config)
    return size if size <= get_settings().cpu_float_weights_max_mb * 2**20 else None


def dequantizes_on_load(path: Path, config: dict[str, Any]) -> bool:
    """Whether this text model loads dequantized to float32 (`load_text_model`; a sharded
    model's ranks follow the same rule: mlx_server/distributed/shard_load.py)."""
    return _dequantized_bytes(path, config) is not None


def loaded_bytes_estimate(path: Path, config: dict[str, Any], *, as_text_model: bool = True) -> int:
    """What loading will take: the files' size, or the float32 size when a text model's load
    dequantizes (`load_text_model`; other model types load as stored)."""
    dequantized = _dequantized_bytes(path, config) if as_text_model else None
    if dequantized is not None:
        return dequantized
    return sum(f.stat().st_size for f in path.glob("*.safetensors"))


def load_text_model(path: str) -> tuple[Any, Any]:
    """mlx-lm's load, then dequantized to float32 where `_dequantized_bytes` says so; on a CPU
    device the weights go on huge pages (utils/huge_pages.py)."""
    import mlx.core as mx
    from mlx.utils import tree_flatten
    from mlx_lm import load
    from mlx_lm.utils import dequantize_model

    model, tokenizer = load(path)
    if _dequantized_bytes(Path(path), _config(path)) is not None:
        model = dequantize_model(model)
        model.set_dtype(mx.float32)  # half-precision products are 10-40x slower on this backend
        mx.eval(model.parameters())
    if mx.default_device() == mx.cpu and get_settings().cpu_huge_pages:
        advise_huge_pages(array for _, array in tree_flatten(model.parameters()))
    return model, tokenizer


def _config(path: str) -> dict[str, Any]:
    config: dict[str, Any] = json.loads((Path(path) / "config.json").read_text())
    return config
