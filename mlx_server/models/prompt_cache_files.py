"""The prompt cache's files: where a model's live, what they are valid for (the fingerprint), and
their format, mlx-lm's (its `load_prompt_cache` reads them back), written by a thread that makes
no MLX call.

mlx-lm's `save_prompt_cache` writes on the thread that calls it, and it must be the MLX thread
(it evaluates the arrays): measured 0.35-0.43 s for one 2 000-token SmolLM2 entry (94 MB) on the
2-core machine, a pause of every stream in the batch. So the MLX thread only exports an entry
(`export_entry`: the held part of each buffer copied out contiguous and evaluated, a memory copy,
and its memory exported through Python's buffer protocol), and a worker thread writes the bytes
(`write_entry`). The layout is the one `save_prompt_cache` writes (a fact
of its format): the layers' states flattened with mlx.utils.tree_flatten, scalars (offsets) as
0-d arrays named in the metadata, and the metadata holding [our metadata, the layers' class
names, the scalars]. tests/mlx_server/models/test_prompt_cache_disk.py reads what is written
here with mlx-lm's loader.
"""

from __future__ import annotations

import hashlib
import json
import struct
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path
from typing import Any

import mlx.core as mx
from mlx.utils import tree_flatten, tree_unflatten
from mlx_lm.models.cache import KVCache, load_prompt_cache

from mlx_server.config import get_settings
from mlx_server.models.loaders import ModelSpec

FORMAT = "mlx-manager-prompt-cache/1"
# A header larger than this is not one of ours (the tokens of a 1M-token entry take ~8 MB).
HEADER_MAX_BYTES = 64 * 1024**2

_DTYPES = {
    mx.float32: "F32",
    mx.float16: "F16",
    mx.bfloat16: "BF16",
    mx.int64: "I64",
    mx.int32: "I32",
    mx.int16: "I16",
    mx.int8: "I8",
    mx.uint64: "U64",
    mx.uint32: "U32",
    mx.uint16: "U16",
    mx.uint8: "U8",
    mx.bool_: "BOOL",
}


def store_dir(model_id: str) -> Path:
    """Where a model's saved entries live (the id hashed: ids may hold slashes)."""
    name = hashlib.sha256(model_id.encode()).hexdigest()[:24]
    return get_settings().home_dir / "prompt-cache" / name


def _files(path: Path | None) -> list[tuple[str, int, int]]:
    """Name, size and modification time of the file at `path` or of the files in it."""
    if path is None:
        return []
    files = [path] if path.is_file() else [p for p in path.iterdir() if p.is_file()]
    return sorted((p.name, p.stat().st_size, p.stat().st_mtime_ns) for p in files)


def fingerprint(spec: ModelSpec) -> str:
    """What a KV cache depends on: the files (names, sizes, modification times) of the model and
    of its LoRA adapter, its draft model (a model with a draft keeps the draft's layers in the
    same entries, speculative.py), how it is loaded (its estimate differs between float32 and as
    stored; KV quantization) and mlx-lm."""
    described = {
        "model": spec.model_id,
        "files": _files(spec.path),
        "lora": _files(spec.lora),
        "draft": [spec.draft.model_id, _files(spec.draft.path)] if spec.draft else None,
        "estimate_bytes": spec.estimate_bytes,
        "kv_bits": spec.kv_bits,
        "kv_group_size": spec.kv_group_size,
        "mlx_lm": version("mlx-lm"),
    }
    return hashlib.sha256(json.dumps(described, sort_keys=True).encode()).hexdigest()


@dataclass(frozen=True)
class Exported:
    """An entry's file, ready for a thread without MLX: the header and the arrays' memory (each
    memoryview keeps its array alive until written)."""

    header: bytes
    chunks: list[memoryview]

    @property
    def size(self) -> int:
        return len(self.header) + sum(chunk.nbytes for chunk in self.chunks)


def _state(layer: Any) -> Any:
    """A layer's state as saved: a KVCache's buffers cut to the tokens it holds (its state is the
    whole allocation, grown 256 tokens at a time; a 50-token entry would take 256 tokens' bytes).
    Loaded back, the cut buffers grow again on the next token (KVCache.update_and_fetch)."""
    if type(layer) is KVCache and layer.keys is not None:
        return (*layer.keys_and_values(), layer.offset)
    return layer.state


def export_entry(cache: list[Any], metadata: dict[str, str]) -> Exported:
    """On the MLX thread: the file of a KV cache (a list of mlx-lm cache layers) with `metadata`.
    Raises ValueError for a layer whose state is not arrays and numbers."""
    arrays: dict[str, mx.array] = {}
    scalars: list[Any] = [""]  # never empty: tree_flatten would drop it, and the loader reads it
    for name, value in tree_flatten([_state(layer) for layer in cache]):
        if isinstance(value, mx.array):
            arrays[name] = value
        elif isinstance(value, bool | int | float):
            arrays[name] = mx.array(value)
            scalars.append((name, "scalar"))
        else:
            raise ValueError(f"a {type(value).__name__} in a KV cache state cannot be saved")
    arrays = {name: mx.contiguous(array) for name, array in arrays.items()}
    mx.eval(list(arrays.values()))
    classes = [type(layer).__name__ for layer in cache]
    described: dict[str, Any] = {"__metadata__": dict(tree_flatten([metadata, classes, scalars]))}
    chunks = []
    offset = 0
    for name, array in arrays.items():
        end = offset + array.nbytes
        described[name] = {"dtype": _DTYPES[array.dtype], "shape": array.shape, "data_offsets": [offset, end]}
        chunks.append(memoryview(array))  # type: ignore[arg-type]  # mx.array has the buffer protocol
        offset = end
    header = json.dumps(described, separators=(",", ":")).encode()
    return Exported(struct.pack("<Q", len(header)) + header, chunks)


def write_entry(path: Path, exported: Exported) -> None:
    """On any thread: write the file whole or not at all (a temporary name, then a rename)."""
    partial = path.with_name(path.name + ".tmp")
    try:
        with partial.open("wb") as out:
            out.write(exported.header)
            for chunk in exported.chunks:
                out.write(chunk)
        partial.replace(path)
    finally:
        partial.unlink(missing_ok=True)


def read_metadata(path: Path) -> dict[str, Any]:
    """On any thread: the metadata of a file, from its header alone; raises ValueError when the
    file is not a whole safetensors file."""
    size = path.stat().st_size
    with path.open("rb") as source:
        head = source.read(8)
        length = struct.unpack("<Q", head)[0] if len(head) == 8 else 0
        if not 2 <= length <= min(HEADER_MAX_BYTES, size - 8):
            raise ValueError("not a safetensors file")
        header = json.loads(source.read(length))
    if not isinstance(header, dict):
        raise ValueError("not a safetensors file")
    ends = [spec["data_offsets"][1] for name, spec in header.items() if name != "__metadata__"]
    if 8 + length + max(ends, default=0) != size:
        raise ValueError(f"its data ends at another place than the file's {size} bytes (truncated?)")
    flat = header.get("__metadata__", {})
    unflat = tree_unflatten(list(flat.items())) if flat else []
    ours = unflat[0] if isinstance(unflat, list) and unflat and isinstance(unflat[0], dict) else {}
    return dict(ours)


def load_entry(path: Path) -> tuple[list[Any], dict[str, str]]:
    """On the MLX thread: a file's KV cache, read now (a damaged file raises here, not in the
    request's first step), and its metadata."""
    cache, metadata = load_prompt_cache(str(path), return_metadata=True)
    states = tree_flatten([layer.state for layer in cache])
    mx.eval([value for _, value in states if isinstance(value, mx.array)])
    return cache, metadata
