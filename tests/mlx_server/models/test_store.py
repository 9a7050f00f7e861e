"""Importing and registering models: all or nothing, database and disk agree."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlmodel import Session

from mlx_server.config import get_settings
from mlx_server.models.gguf_import import GGUFImportError
from mlx_server.models.store import (
    DEFAULT_EMBEDDING_MODEL_ID,
    DEFAULT_MODEL_ID,
    DEFAULT_STT_MODEL_ID,
    ModelStoreError,
    default_embedding_model_dir,
    ensure_default_models,
    import_directory,
    import_gguf,
    list_models,
)
from mlx_server.records import ModelSource
from tests.support import copy_truncated


def _models_dir() -> Path:
    return get_settings().models_dir


def test_import_registers_model_with_its_directory(session: Session, smollm_gguf: Path) -> None:
    record = import_gguf(session, smollm_gguf, _models_dir(), "smol")
    assert record.source == ModelSource.GGUF_IMPORT
    assert Path(record.path) == _models_dir() / "smol"
    assert (Path(record.path) / "model.safetensors").is_file()
    assert record.size_bytes > 90 * 2**20
    assert record.origin == str(smollm_gguf.resolve())
    assert [m.id for m in list_models(session)] == ["smol"]


def test_importing_the_same_id_twice_is_refused_and_changes_nothing(
    session: Session, smollm_gguf: Path
) -> None:
    first = import_gguf(session, smollm_gguf, _models_dir(), "smol")
    before = sorted(p.name for p in Path(first.path).iterdir())
    with pytest.raises(ModelStoreError, match="already exists; pass --id"):
        import_gguf(session, smollm_gguf, _models_dir(), "smol")
    assert [m.id for m in list_models(session)] == ["smol"]
    assert sorted(p.name for p in Path(first.path).iterdir()) == before
    assert [p.name for p in _models_dir().iterdir()] == ["smol"]


def test_broken_gguf_leaves_database_and_disk_unchanged(
    session: Session, smollm_gguf: Path, tmp_path: Path
) -> None:
    import_gguf(session, smollm_gguf, _models_dir(), "smol")
    broken = copy_truncated(smollm_gguf, tmp_path / "broken.gguf", 1_000_000)
    with pytest.raises(GGUFImportError):
        import_gguf(session, broken, _models_dir(), "broken")
    assert [m.id for m in list_models(session)] == ["smol"]
    assert [p.name for p in _models_dir().iterdir()] == ["smol"]


@pytest.mark.parametrize("bad_id", ["", "../escape", "a/b/c", "-leading", "with space"])
def test_invalid_model_ids_are_refused(session: Session, smollm_gguf: Path, bad_id: str) -> None:
    with pytest.raises(ModelStoreError, match="invalid model id"):
        import_gguf(session, smollm_gguf, _models_dir(), bad_id)
    assert list_models(session) == []


def test_hub_style_ids_map_to_flat_directories(session: Session, smollm_gguf: Path) -> None:
    record = import_gguf(session, smollm_gguf, _models_dir(), "local/smol")
    assert Path(record.path) == _models_dir() / "local--smol"


def test_default_models_are_imported_once(session: Session) -> None:
    imported = ensure_default_models(session, _models_dir())
    defaults = [DEFAULT_MODEL_ID, DEFAULT_EMBEDDING_MODEL_ID, DEFAULT_STT_MODEL_ID]
    assert [m.id for m in imported] == defaults
    assert ensure_default_models(session, _models_dir()) == []
    assert [m.id for m in list_models(session)] == defaults
    embedding = Path(imported[1].path)
    assert embedding == _models_dir() / DEFAULT_EMBEDDING_MODEL_ID and imported[1].source == ModelSource.LOCAL
    for name in ("model.safetensors", "tokenizer.json", "modules.json", "1_Pooling/config.json"):
        assert (embedding / name).is_file(), name
    assert not (embedding / ".gitattributes").exists()
    assert imported[1].size_bytes > 80 * 2**20


def test_directory_import_keeps_database_and_disk_in_agreement(session: Session) -> None:
    import_directory(session, default_embedding_model_dir(), _models_dir(), "minilm")
    with pytest.raises(ModelStoreError, match="already exists"):
        import_directory(session, default_embedding_model_dir(), _models_dir(), "minilm")
    with pytest.raises(ModelStoreError, match="invalid model id"):
        import_directory(session, default_embedding_model_dir(), _models_dir(), "../escape")
    assert [p.name for p in _models_dir().iterdir()] == ["minilm"]
    assert [m.id for m in list_models(session)] == ["minilm"]
