"""What a path on disk holds, read from its files only: an MLX model, a checkpoint to convert,
a GGUF file for the importer, or why it cannot be used."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mlx_server.models.detection import ModelType
from mlx_server.models.disk import gguf_architecture, inspect_path
from mlx_server.models.store import default_embedding_model_dir, suggested_model_id
from tests.fixtures.disk_models import write_tiny_checkpoint


def test_mlx_models_are_addable_with_their_type_and_bits(smollm_dir: Path) -> None:
    found = inspect_path(smollm_dir)
    assert (found.kind, found.model_type, found.bits) == ("mlx", ModelType.TEXT_GEN, 4)
    assert found.addable and not found.convertible
    assert found.size_bytes > 90 * 2**20
    embeddings = inspect_path(default_embedding_model_dir())  # sentence-transformers' own files
    assert (embeddings.kind, embeddings.model_type) == ("mlx", ModelType.EMBEDDINGS)


def test_a_transformers_checkpoint_is_to_be_converted_and_says_why(tmp_path: Path) -> None:
    found = inspect_path(write_tiny_checkpoint(tmp_path / "ckpt"))
    assert found.kind == "checkpoint" and found.convertible and found.addable
    assert found.reason.startswith("a Hugging Face checkpoint")
    assert "BF16" in found.reason and "'pt'" in found.reason and "convert" in found.reason


@pytest.mark.parametrize(
    ("layout", "reason"),
    [
        ("pytorch", "PyTorch weights only (pytorch_model.bin)"),
        ("unknown-type", "mlx-lm has no model type 'not_a_model'"),
        ("custom-code", "custom Python code"),
        ("no-weights", "no weights"),
        ("no-config", "no config.json"),
    ],
)
def test_what_cannot_be_used_says_why(tmp_path: Path, layout: str, reason: str) -> None:
    path = tmp_path / layout
    if layout == "pytorch":
        path.mkdir()
        (path / "config.json").write_text(json.dumps({"model_type": "llama"}))
        (path / "pytorch_model.bin").write_bytes(b"\0" * 64)
    elif layout == "no-weights":
        path.mkdir()
        (path / "config.json").write_text(json.dumps({"model_type": "llama"}))
    elif layout == "no-config":
        path.mkdir()
        (path / "notes.txt").write_text("hello")
    else:
        custom = {"model_type": "llama", "model_file": "m.py"}
        config = {"model_type": "not_a_model"} if layout == "unknown-type" else custom
        write_tiny_checkpoint(path, config=config)
    found = inspect_path(path)
    assert found.kind == ("pytorch" if layout == "pytorch" else "unsupported") and not found.addable
    assert reason in found.reason


def test_gguf_files_are_read_from_their_header(smollm_gguf: Path, tmp_path: Path) -> None:
    assert gguf_architecture(smollm_gguf) == "llama"
    found = inspect_path(smollm_gguf)
    assert (found.kind, found.model_type) == ("gguf", ModelType.TEXT_GEN) and "llama" in found.reason
    other = tmp_path / "notes.gguf"
    other.write_bytes(b"GGUF" + b"\x03\x00\x00\x00" + b"\xff" * 8)  # truncated after the version
    assert inspect_path(other).kind == "unsupported"
    split = tmp_path / "big-00001-of-00002.gguf"
    split.write_bytes(smollm_gguf.read_bytes()[:4096])
    assert "split GGUF" in inspect_path(split).reason
    with pytest.raises(FileNotFoundError):
        inspect_path(tmp_path / "nothing-here")


def test_ids_come_from_the_hub_cache_repo_or_the_name(tmp_path: Path) -> None:
    snapshot = tmp_path / "models--mlx-community--Qwen3-4B-4bit" / "snapshots" / ("a" * 40)
    snapshot.mkdir(parents=True)
    assert suggested_model_id(snapshot) == "mlx-community/Qwen3-4B-4bit"
    folder = tmp_path / "My Model (v2)"
    folder.mkdir()
    assert suggested_model_id(folder) == "My-Model-v2"


@pytest.mark.parametrize(
    ("fixture", "model_type"),
    [
        ("tiny_vision_dir", ModelType.VISION),
        ("tiny_tts_dir", ModelType.TEXT_TO_SPEECH),
        ("whisper_dir", ModelType.SPEECH_TO_TEXT),
    ],
)
def test_vision_and_speech_directories_are_addable_with_their_type(
    request: pytest.FixtureRequest, fixture: str, model_type: ModelType
) -> None:
    found = inspect_path(request.getfixturevalue(fixture))
    assert (found.kind, found.model_type) == ("mlx", model_type) and found.addable
