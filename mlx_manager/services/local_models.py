"""The models page's view of every registered model, and deleting one safely.

A row joins what is on disk (ModelRecord, config.json), what the probe found
(ModelCapabilities) and what the pool holds right now (loaded, pinned, memory).
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path

from sqlmodel import Session, select

from mlx_manager.services.hub import config_quantization_bits
from mlx_server.facade import (
    ModelCapabilities,
    ModelRecord,
    ModelSource,
    delete_model,
    detect_model_type,
    get_server_settings,
    keeps_files,
    list_models,
    pool_state,
)

__all__ = ["DiskUsage", "LocalModel", "delete_model", "disk_usage", "local_model", "local_models"]


@dataclass(frozen=True)
class LocalModel:
    record: ModelRecord
    capabilities: ModelCapabilities | None
    bits: int | None
    loaded: bool
    pinned: bool
    busy: bool  # serving requests right now
    # What the probe stored, else what the files say (detection: config.json, modules.json).
    model_type: str
    # Its directory is gone (moved, deleted, a disk unplugged): requests for it are refused.
    missing: bool = False

    @property
    def id(self) -> str:
        return self.record.id

    @property
    def badges(self) -> list[str]:
        """Capabilities a user picks a model by; only what the probe verified."""
        caps = self.capabilities
        if caps is None:
            return []
        found = [
            ("tools", caps.tool_format is not None),
            ("thinking", bool(caps.supports_thinking)),
            ("vision", caps.model_type == "vision"),
            ("embeddings", caps.model_type == "embeddings"),
            ("rerank", caps.model_type == "rerank"),
            ("speech-to-text", bool(caps.supports_stt)),
            ("text-to-speech", bool(caps.supports_tts)),
        ]
        return [name for name, present in found if present]

    @property
    def keeps_files(self) -> bool:
        """Deleting it only unregisters it: registered in place, or outside our models directory."""
        return keeps_files(self.record)


@dataclass(frozen=True)
class DiskUsage:
    models_bytes: int
    free_bytes: int


def local_quantization_bits(path: Path) -> int | None:
    """Bits per weight from a model directory's config.json; None when unquantized or unreadable."""
    try:
        config = json.loads((path / "config.json").read_text())
    except (OSError, ValueError):
        return None
    return config_quantization_bits(config) if isinstance(config, dict) else None


def local_models(session: Session) -> list[LocalModel]:
    capabilities = {c.model_id: c for c in session.exec(select(ModelCapabilities))}
    rows = []
    for record in list_models(session):
        state = pool_state(record.id)
        rows.append(
            LocalModel(
                record=record,
                capabilities=capabilities.get(record.id),
                bits=local_quantization_bits(Path(record.path)),
                loaded=state.loaded,
                pinned=state.pinned,
                busy=state.busy,
                model_type=_model_type(record, capabilities.get(record.id)),
                missing=not (Path(record.path) / "config.json").is_file(),
            )
        )
    return rows


def _model_type(record: ModelRecord, capabilities: ModelCapabilities | None) -> str:
    if capabilities is not None and capabilities.model_type:
        return capabilities.model_type
    return str(detect_model_type(Path(record.path)))


def local_model(session: Session, model_id: str) -> LocalModel | None:
    return next((m for m in local_models(session) if m.id == model_id), None)


def disk_usage(models: list[LocalModel]) -> DiskUsage:
    home = get_server_settings().home_dir
    home.mkdir(parents=True, exist_ok=True)
    return DiskUsage(
        models_bytes=sum(m.record.size_bytes for m in models), free_bytes=shutil.disk_usage(home).free
    )


def added_how(record: ModelRecord) -> str:
    """How a model just added from disk got here, for the page's message."""
    if record.source == ModelSource.IN_PLACE:
        return f"registered where it is, in {record.path}; nothing was copied"
    if record.source == ModelSource.GGUF_IMPORT:
        return f"converted from GGUF into {record.path}"
    return f"copied into {record.path}"
