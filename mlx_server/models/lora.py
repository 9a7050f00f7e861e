"""LoRA adapters (mlx-lm's format) over local text models, served as their own model id.

An adapter directory holds `adapter_config.json` (fine_tune_type "lora" or "dora", num_layers,
lora_parameters: rank, scale, optional keys) and `adapters.safetensors`, as `mlx_lm.lora`
writes them. Registered against a base model (records.LoraAdapter), it is requested as
"<base>+<name>"; the pool loads base and adapter as one entry (loaders.py: the base as usual,
float32 on a fast-BLAS CPU, then mlx-lm's `load_adapters`), counted, unloaded and evicted like
any model. Not chat-template adapters: those are `models/adapters/`.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from sqlmodel import Session, col, select

from mlx_server.errors import APIError
from mlx_server.models.detection import ModelType
from mlx_server.records import LoraAdapter
from mlx_server.utils.paths import file_or_directory

ADAPTER_CONFIG = "adapter_config.json"
ADAPTER_WEIGHTS = "adapters.safetensors"
SEPARATOR = "+"
NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
FINE_TUNE_TYPES = ("lora", "dora")


def adapter_model_id(base_model_id: str, name: str) -> str:
    return f"{base_model_id}{SEPARATOR}{name}"


def find_adapter(session: Session, model_id: str) -> LoraAdapter | None:
    """The adapter a model id names ("<base>+<name>"), if one is registered."""
    if SEPARATOR not in model_id:
        return None
    return session.get(LoraAdapter, model_id)


def list_adapters(session: Session) -> list[LoraAdapter]:
    return list(session.exec(select(LoraAdapter).order_by(col(LoraAdapter.id))))


def adapter_bytes(directory: Path) -> int:
    return (directory / ADAPTER_WEIGHTS).stat().st_size


def _refused(message: str, code: str = "invalid_adapter") -> APIError:
    return APIError(400, message, param="path", code=code)


def read_adapter_config(directory: Path) -> dict[str, Any]:
    """The adapter's config, after checking the directory has mlx-lm's two files (400 if not)."""
    if file_or_directory(directory) != "directory":
        raise _refused(f"{directory} is not a directory on the server.")
    missing = [name for name in (ADAPTER_CONFIG, ADAPTER_WEIGHTS) if not (directory / name).is_file()]
    if missing:
        raise _refused(
            f"{directory} lacks {' and '.join(missing)}: an mlx-lm adapter directory holds "
            f"{ADAPTER_CONFIG} and {ADAPTER_WEIGHTS} (as `mlx_lm.lora --train` writes them)."
        )
    try:
        config = json.loads((directory / ADAPTER_CONFIG).read_text())
    except (OSError, ValueError) as exc:
        raise _refused(f"{directory / ADAPTER_CONFIG} is not valid JSON: {exc}") from None
    if not isinstance(config, dict):
        raise _refused(f"{directory / ADAPTER_CONFIG} must hold a JSON object.")
    kind = config.get("fine_tune_type", "lora")
    if kind not in FINE_TUNE_TYPES:
        raise _refused(
            f"fine_tune_type {kind!r} is not an adapter: use a {' or '.join(FINE_TUNE_TYPES)} adapter "
            "(a full fine-tune is a model of its own: import it as a model)."
        )
    parameters = config.get("lora_parameters")
    if not isinstance(config.get("num_layers"), int) or not isinstance(parameters, dict):
        raise _refused(f"{directory / ADAPTER_CONFIG} needs num_layers (an integer) and lora_parameters.")
    if "rank" not in parameters or "scale" not in parameters:
        raise _refused(f"lora_parameters in {directory / ADAPTER_CONFIG} needs rank and scale.")
    return config


def apply_adapter(model: Any, directory: Path) -> None:
    """Turn `model`'s layers into LoRA layers and load the adapter's weights (mlx-lm's
    load_adapters: it refuses tensors whose names or shapes the model lacks). 400 if so."""
    from mlx_lm.tuner.utils import load_adapters

    read_adapter_config(directory)
    try:
        load_adapters(model, str(directory))
    except (ValueError, KeyError, AttributeError, TypeError) as exc:
        raise _refused(f"The adapter in {directory} does not fit this base model: {exc}") from None


def check_adapter(base_path: Path, directory: Path) -> None:
    """Apply the adapter to the base model loaded lazily (shapes only, no weights read): what
    loading it would refuse is refused now, with the same message."""
    from mlx_lm.utils import load_model

    model, _config = load_model(base_path, lazy=True)
    apply_adapter(model, directory)


def adapter_directory(adapter: LoraAdapter, model_type: ModelType) -> Path:
    """The directory to load `adapter` from, once checked it can load (pool, at read_spec)."""
    if model_type != ModelType.TEXT_GEN:
        raise APIError(
            400, f"{adapter.id!r} is a LoRA adapter over a {model_type} model; only text models take one."
        )
    directory = Path(adapter.path)
    if not (directory / ADAPTER_WEIGHTS).is_file():
        raise APIError(
            409,
            f"The files of LoRA adapter {adapter.id!r} are missing from {directory}; register it again.",
            param="model",
            code="model_files_missing",
        )
    return directory
