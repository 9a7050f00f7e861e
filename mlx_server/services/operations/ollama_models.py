"""The model catalog as Ollama describes it: /api/tags, /api/show and /api/ps.

Names are the server's model ids. Fields Ollama fills from its own model store are filled
from what the model directory says: `details.family` is the config's model_type,
`parameter_size` the parameters its safetensors headers hold (a quantized layer's packed values
counted, written as Ollama does: "134.52M", "7.6B"), the quantization level its
`quantization.bits` (Q4, Q8) or else the weights' dtype (BF16, F32), `digest` a
stable hash of the id, path and registration time (a model re-imported under the same id gets
a new one). `size_vram` is the memory the pool counts for the model (MLX's unified memory).
"""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime
from functools import lru_cache
from pathlib import Path
from typing import Any

from sqlmodel import Session

from mlx_server.database import get_engine
from mlx_server.models.cpu_weights import parameter_count, weight_dtypes
from mlx_server.models.defaults import ModelDefaults
from mlx_server.models.detection import ModelType, detect_model_type, read_chat_template, read_config
from mlx_server.models.pool import get_model_pool
from mlx_server.models.store import get_model, list_models
from mlx_server.records import ModelCapabilities, ModelRecord

# What /api/ps shows for a model kept loaded (Ollama shows a date centuries away too).
FOREVER = datetime(2318, 1, 1, tzinfo=UTC)
_CAPABILITIES = {
    ModelType.TEXT_GEN: ["completion", "tools"],
    ModelType.VISION: ["completion", "tools", "vision"],
    ModelType.EMBEDDINGS: ["embedding"],
}


# ModelDefaults field -> Ollama's parameter name (as a Modelfile's PARAMETER lines name them).
OLLAMA_PARAMETERS = {
    "temperature": "temperature",
    "top_p": "top_p",
    "top_k": "top_k",
    "min_p": "min_p",
    "repetition_penalty": "repeat_penalty",
    "max_tokens": "num_predict",
    "context_length": "num_ctx",
    "stop": "stop",
}


def _parameters(defaults: ModelDefaults) -> list[tuple[str, Any]]:
    """(name, value) per PARAMETER line: one line per stop string, quoted, as Ollama writes them."""
    lines: list[tuple[str, Any]] = []
    for field, name in OLLAMA_PARAMETERS.items():
        value = getattr(defaults, field)
        if isinstance(value, list):
            lines += [(name, json.dumps(item, ensure_ascii=False)) for item in value]
        elif value is not None:
            lines.append((name, value))
    return lines


def parameters_text(defaults: ModelDefaults) -> str:
    """The model's defaults in Ollama's `parameters` text: a name padded to 30 columns, then the
    value, one per line."""
    return "\n".join(f"{name:<30} {value}" for name, value in _parameters(defaults))


def _modelfile(record: ModelRecord, defaults: ModelDefaults) -> str:
    lines = [f"# Served by MLX Server from {record.path}", f"FROM {record.id}"]
    lines += [f"PARAMETER {name} {value}" for name, value in _parameters(defaults)]
    if defaults.system_prompt:
        lines.append(f'SYSTEM """{defaults.system_prompt}"""')
    return "\n".join(lines) + "\n"


def _iso(moment: datetime) -> str:
    return (moment if moment.tzinfo else moment.replace(tzinfo=UTC)).isoformat().replace("+00:00", "Z")


def digest(record: ModelRecord) -> str:
    return hashlib.sha256(f"{record.id}\n{record.path}\n{record.created_at}".encode()).hexdigest()


_DTYPES = {"bfloat16": "BF16", "float16": "F16", "float32": "F32"}
_FLOAT_TENSORS = ("BF16", "F16", "F32")


def _quantization(path: Path, config: dict[str, Any]) -> str:
    bits = (config.get("quantization") or config.get("quantization_config") or {}).get("bits")
    if isinstance(bits, int):
        return f"Q{bits}"
    dtype = _DTYPES.get(str(config.get("torch_dtype") or config.get("dtype")))
    if dtype is not None:
        return dtype
    stored = {k: v for k, v in _weights(path)[1].items() if k in _FLOAT_TENSORS}
    return max(stored, key=lambda k: stored[k]) if stored else ""


def human_number(count: int) -> str:
    """A parameter count the way Ollama writes it: 7.6B, 134.52M, 22.71M."""
    if count >= 1_000_000_000:
        return f"{count / 1e9:.1f}B"
    if count >= 1_000_000:
        return f"{count / 1e6:.2f}M"
    return f"{count / 1e3:.2f}K" if count >= 1000 else str(count)


@lru_cache(maxsize=256)
def _headers(path: str, stamp: tuple[int, ...], config_text: str) -> tuple[int, dict[str, int]]:
    config = json.loads(config_text)
    return parameter_count(Path(path), config), weight_dtypes(Path(path))


def _weights(path: Path, config: dict[str, Any] | None = None) -> tuple[int, dict[str, int]]:
    """Parameters and tensor dtypes from the headers, read again only when the files change."""
    files = sorted(path.glob("*.safetensors"))
    stamp = tuple(f.stat().st_mtime_ns for f in files)
    return _headers(str(path), stamp, json.dumps(config if config is not None else read_config(path)))


def details(path: Path, config: dict[str, Any]) -> dict[str, Any]:
    family = str(config.get("model_type", ""))
    parameters = _weights(path, config)[0]
    return {
        "parent_model": "",
        "format": "safetensors",
        "family": family,
        "families": [family] if family else None,
        "parameter_size": human_number(parameters) if parameters else "",
        "quantization_level": _quantization(path, config),
    }


def _summary(record: ModelRecord) -> dict[str, Any]:
    return {
        "name": record.id,
        "model": record.id,
        "modified_at": _iso(record.created_at),
        "size": record.size_bytes,
        "digest": digest(record),
        "details": details(Path(record.path), read_config(Path(record.path))),
        **({"sharded": sharded} if (sharded := get_model_pool().sharding_of(record.id)) else {}),
    }


def tags() -> dict[str, Any]:
    with Session(get_engine()) as session:
        return {"models": [_summary(record) for record in list_models(session)]}


def _model_info(model_id: str, config: dict[str, Any]) -> dict[str, Any]:
    architecture = str(config.get("model_type", ""))
    info: dict[str, Any] = {"general.architecture": architecture, "general.basename": model_id}
    keys = {
        "context_length": ("max_position_embeddings", "max_seq_len"),
        "embedding_length": ("hidden_size", "d_model"),
        "block_count": ("num_hidden_layers", "n_layers"),
        "attention.head_count": ("num_attention_heads",),
        "attention.head_count_kv": ("num_key_value_heads",),
        "vocab_size": ("vocab_size",),
    }
    for key, names in keys.items():
        value = next((config[n] for n in names if isinstance(config.get(n), int)), None)
        if value is not None:
            info[f"{architecture}.{key}"] = value
    return info


def show(model_id: str) -> dict[str, Any]:
    """The model's details, chat template and capabilities (`model_id` is a registered id)."""
    with Session(get_engine()) as session:
        record = get_model(session, model_id)
        probed = session.get(ModelCapabilities, model_id)
    assert record is not None, "resolved by ollama_model()"
    path = Path(record.path)
    config = read_config(path)
    model_type = (
        ModelType(probed.model_type) if probed and probed.model_type else detect_model_type(path, config)
    )
    capabilities = list(_CAPABILITIES.get(model_type, []))
    if probed is not None and probed.supports_thinking:
        capabilities.append("thinking")
    defaults = ModelDefaults.from_stored(record.defaults)
    shown = {
        "modelfile": _modelfile(record, defaults),
        "parameters": parameters_text(defaults),
        "template": read_chat_template(path),
        "details": details(path, config),
        "model_info": _model_info(record.id, config),
        "capabilities": capabilities,
        "modified_at": _iso(record.created_at),
    }
    return {**shown, "system": defaults.system_prompt} if defaults.system_prompt else shown


def running() -> dict[str, Any]:
    """The loaded models, most recently used first, with when each would be unloaded if idle."""
    pool = get_model_pool()
    with Session(get_engine()) as session:
        records = {record.id: record for record in list_models(session)}
    models = []
    for status in pool.status()["models"]:
        loaded, record = pool.get_loaded(status["id"]), records.get(status["id"])
        if loaded is None or record is None:
            continue
        ttl = pool.idle_ttl_of(loaded)
        until = loaded.last_used + ttl
        expires = FOREVER if until >= FOREVER.timestamp() else datetime.fromtimestamp(until, UTC)
        models.append(
            {
                **_summary(record),
                "expires_at": _iso(expires),
                "size": loaded.size_bytes,
                "size_vram": loaded.size_bytes,
                "context_length": loaded.context_length,
            }
        )
    return {"models": models}
