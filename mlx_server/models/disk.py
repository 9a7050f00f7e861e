"""What a path on disk holds, before anything is loaded: an MLX model, a Hugging Face checkpoint
to convert, a GGUF file for the importer, or something this server cannot load (and why).

Read from the files only (config.json, the safetensors header, the GGUF header), so the models
page can classify every folder it finds in a moment. The type comes from detection.py, as for
registered models.
"""

from __future__ import annotations

import contextlib
import json
import re
import struct
from dataclasses import dataclass
from importlib.util import find_spec
from pathlib import Path
from typing import Any, BinaryIO, Literal

from mlx_server.models.detection import ModelType, detect_model_type, read_config
from mlx_server.models.gguf_import import SUPPORTED_ARCHITECTURES
from mlx_server.utils.paths import file_or_directory

# mlx: loads as it is (MLX weights; embeddings, vision and audio loaders also read Hugging Face
# safetensors). checkpoint: a text model's Hugging Face checkpoint mlx-lm supports: convert it
# (mlx-lm also loads it as it is, unquantized). gguf: the importer converts it. pytorch: only
# PyTorch weights, which neither loads nor converts here. unsupported: anything else.
DiskKind = Literal["mlx", "checkpoint", "gguf", "pytorch", "unsupported"]

PYTORCH_WEIGHTS = ("*.bin", "*.pt", "*.pth", "*.ckpt")
_SPLIT_GGUF = re.compile(r"-\d{5}-of-\d{5}\.gguf$")


@dataclass(frozen=True)
class DiskModel:
    path: Path
    kind: DiskKind
    model_type: ModelType | None  # None: not a model directory or file we could read
    size_bytes: int
    reason: str  # what it is, or why it cannot be used, in a line
    bits: int | None = None  # MLX quantization

    @property
    def addable(self) -> bool:
        """`models add` registers it (a checkpoint runs unquantized; a GGUF file is converted)."""
        return self.kind in ("mlx", "checkpoint", "gguf")

    @property
    def convertible(self) -> bool:
        return self.kind == "checkpoint"


def expand_user(path: Path) -> Path:
    """`~` expanded where it can be ("~someone" of no such user stays as typed), made absolute."""
    with contextlib.suppress(RuntimeError):
        path = path.expanduser()
    return path.absolute()


def directory_size(path: Path, depth: int = 2) -> int:
    """Bytes of the files in `path` and its subdirectories down to `depth` levels (a model's
    layout; bounded, so a path that is no model is never walked whole). Symlinks are followed:
    a hub snapshot links its blobs."""
    total = 0
    try:
        entries = list(path.iterdir())
    except OSError:
        return 0
    for entry in entries:
        if entry.is_file():
            total += entry.stat().st_size
        elif entry.is_dir() and depth > 1:
            total += directory_size(entry, depth - 1)
    return total


def safetensors_header(path: Path) -> dict[str, Any]:
    """The JSON header of a safetensors file ({} when unreadable)."""
    try:
        with path.open("rb") as file:
            (length,) = struct.unpack("<Q", file.read(8))
            if length > 100 * 2**20:
                return {}
            header = json.loads(file.read(length))
    except (OSError, ValueError, struct.error):
        return {}
    return header if isinstance(header, dict) else {}


def weights_dtype(header: dict[str, Any]) -> str | None:
    """The dtype of the first floating tensor in a safetensors header (BF16, F16, F32...)."""
    for name, entry in header.items():
        if (
            name != "__metadata__"
            and isinstance(entry, dict)
            and str(entry.get("dtype", "")).startswith(("F", "BF"))
        ):
            return str(entry["dtype"])
    return None


def saved_as(header: dict[str, Any]) -> str | None:
    """Who wrote a safetensors file, as its metadata says: "mlx" (mlx-lm, our importers), "pt"
    (transformers)...; None when it says nothing."""
    metadata = header.get("__metadata__")
    saved_by = metadata.get("format") if isinstance(metadata, dict) else None
    return saved_by if isinstance(saved_by, str) else None


def mlx_lm_architecture(config: dict[str, Any]) -> str | None:
    """The mlx-lm module that runs this config's model_type (its own remapping), or None."""
    from mlx_lm import utils

    model_type = str(config.get("model_type", ""))
    architectures = config.get("architectures") or ()
    remap = getattr(utils, "MODEL_ARCHITECTURE_REMAPPING", {})
    module = next((remap[(model_type, a)] for a in architectures if (model_type, a) in remap), None)
    module = module or getattr(utils, "MODEL_REMAPPING", {}).get(model_type, model_type)
    if not module or not re.fullmatch(r"[a-z0-9_]+", module):
        return None
    return module if find_spec(f"mlx_lm.models.{module}") is not None else None


def inspect_path(path: Path) -> DiskModel:
    """Classify a model directory or a GGUF file (FileNotFoundError if nothing is there)."""
    found = file_or_directory(path)
    if found == "file":
        return _inspect_gguf(path)
    if found is None:
        raise FileNotFoundError(f"nothing at {path}")
    config = read_config(path)
    if not config:
        return DiskModel(path, "unsupported", None, 0, "no config.json: not a model directory")
    model_type = detect_model_type(path, config)
    kind, reason = _weights(path, config, model_type)
    return DiskModel(path, kind, model_type, directory_size(path), reason, _bits(config))


def _bits(config: dict[str, Any]) -> int | None:
    quantization = config.get("quantization")
    bits = quantization.get("bits") if isinstance(quantization, dict) else None
    return bits if isinstance(bits, int) else None


def _weights(path: Path, config: dict[str, Any], model_type: ModelType) -> tuple[DiskKind, str]:
    """Whether the weights can be loaded as they are, must be converted, or cannot be used."""
    safetensors = sorted(path.glob("*.safetensors")) + sorted(path.glob("*.npz"))
    if not safetensors:
        pytorch = [p.name for pattern in PYTORCH_WEIGHTS for p in sorted(path.glob(pattern))]
        if pytorch:
            return "pytorch", (
                f"PyTorch weights only ({pytorch[0]}); mlx-lm converts safetensors checkpoints, so "
                "save this one as safetensors first (transformers' save_pretrained)"
            )
        return "unsupported", "no weights (safetensors) in the directory; is the download complete?"
    if "model_file" in config:
        return "unsupported", "its architecture is custom Python code (model_file), which is never run here"
    if model_type != ModelType.TEXT_GEN:
        return "mlx", f"{model_type} model ({_format_words(safetensors[0], config)})"
    if mlx_lm_architecture(config) is None:
        return (
            "unsupported",
            f"mlx-lm has no model type {config.get('model_type')!r}, so it cannot load or convert it",
        )
    if not list(path.glob("model*.safetensors")):
        return "unsupported", f"mlx-lm reads model*.safetensors; this directory has {safetensors[0].name}"
    header = safetensors_header(safetensors[0])
    is_mlx = saved_as(header) == "mlx" or "quantization" in config
    if is_mlx:
        return "mlx", f"MLX model ({_format_words(safetensors[0], config)})"
    return "checkpoint", (
        f"a Hugging Face checkpoint ({_format_words(safetensors[0], config)}); convert it to MLX at 4 or "
        "8 bits (added as it is, mlx-lm runs it unquantized)"
    )


def _format_words(weights: Path, config: dict[str, Any]) -> str:
    bits = _bits(config)
    header = safetensors_header(weights) if weights.suffix == ".safetensors" else {}
    dtype = weights_dtype(header)
    saved_by = saved_as(header)
    parts = [f"{bits}-bit" if bits else (dtype or "float"), str(config.get("model_type") or "unknown type")]
    if saved_by and saved_by != "mlx":
        parts.append(f"saved as {saved_by!r}")
    return ", ".join(parts)


def _inspect_gguf(path: Path) -> DiskModel:
    size = path.stat().st_size
    if path.suffix.lower() != ".gguf":
        return DiskModel(
            path, "unsupported", None, size, "not a GGUF file: add a model directory or a .gguf file"
        )
    if _SPLIT_GGUF.search(path.name):
        return DiskModel(
            path, "unsupported", None, size, "one part of a split GGUF file; join the parts first"
        )
    architecture = gguf_architecture(path)
    if architecture is None:
        return DiskModel(path, "unsupported", None, size, "not a readable GGUF file")
    if architecture not in SUPPORTED_ARCHITECTURES:
        supported = ", ".join(SUPPORTED_ARCHITECTURES)
        return DiskModel(
            path,
            "unsupported",
            None,
            size,
            f"GGUF of architecture {architecture!r}; the importer reads {supported}",
        )
    return DiskModel(
        path, "gguf", ModelType.TEXT_GEN, size, f"GGUF ({architecture}): converted to MLX when added"
    )


# GGUF value types (gguf.h): fixed sizes of the scalars; 8 is a string, 9 an array.
_GGUF_SIZES = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
_GGUF_STRING, _GGUF_ARRAY = 8, 9
_GGUF_MAX_KEYS = 64  # general.architecture comes first in every writer we know


def gguf_architecture(path: Path) -> str | None:
    """`general.architecture` from a GGUF file's header (v2 and v3), reading only its start."""
    try:
        with path.open("rb") as file:
            if file.read(4) != b"GGUF" or struct.unpack("<I", file.read(4))[0] < 2:
                return None
            _tensors, keys = struct.unpack("<QQ", file.read(16))
            for _ in range(min(keys, _GGUF_MAX_KEYS)):
                key = _gguf_string(file)
                (value_type,) = struct.unpack("<I", file.read(4))
                if key == "general.architecture" and value_type == _GGUF_STRING:
                    return _gguf_string(file)
                if not _gguf_skip(file, value_type):
                    return None
    except (OSError, ValueError, struct.error):
        return None
    return None


def _gguf_string(file: BinaryIO) -> str:
    (length,) = struct.unpack("<Q", file.read(8))
    if length > 1 << 20:
        raise ValueError("implausible GGUF string")
    return file.read(length).decode("utf-8", errors="replace")


def _gguf_skip(file: BinaryIO, value_type: int) -> bool:
    """Move past one value; False for what is not worth walking (arrays of strings)."""
    if value_type in _GGUF_SIZES:
        file.seek(_GGUF_SIZES[value_type], 1)
    elif value_type == _GGUF_STRING:
        file.seek(struct.unpack("<Q", file.read(8))[0], 1)
    elif value_type == _GGUF_ARRAY:
        item_type, count = struct.unpack("<IQ", file.read(12))
        if item_type not in _GGUF_SIZES:
            return False
        file.seek(_GGUF_SIZES[item_type] * count, 1)
    else:
        return False
    return True
