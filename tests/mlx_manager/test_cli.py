"""The `mlx-manager` command line."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlmodel import Session
from typer.testing import CliRunner

from mlx_manager.cli import app
from mlx_server.database import head_revision
from mlx_server.models.pool import reset_model_pool
from mlx_server.records import ModelCapabilities, ModelRecord, ModelSource
from mlx_server.services.operations.probe import STEP_NAMES
from mlx_server.utils.metal import reset_metal_thread
from tests.support import copy_truncated

runner = CliRunner()


def test_import_gguf_then_list(smollm_gguf: Path, home: Path) -> None:
    result = runner.invoke(app, ["models", "import-gguf", str(smollm_gguf), "--id", "smol"])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    # The plan comes first: what the file holds, then what the import stores and its size.
    assert lines[0].endswith("(llama), 0.13B parameters")
    assert lines[1].startswith("  source: Q4_1, 93.8 MiB (Q4_1 210 tensors, Q8_0 1 tensors, F32 61 tensors)")
    assert lines[2].startswith("  stored as (auto): 4-bit 79%, 8-bit 21%, float 0%, about ")
    assert "imported smol" in lines[3]
    listed = runner.invoke(app, ["models", "list"])
    assert listed.exit_code == 0
    assert listed.output.startswith("smol\tgguf-import\t")
    assert str(home / "models" / "smol") in listed.output


def test_import_twice_fails_with_a_hint(smollm_gguf: Path) -> None:
    runner.invoke(app, ["models", "import-gguf", str(smollm_gguf), "--id", "smol"])
    again = runner.invoke(app, ["models", "import-gguf", str(smollm_gguf), "--id", "smol"])
    assert again.exit_code == 1
    assert "already exists; pass --id" in again.output


def test_an_id_too_long_for_a_file_name_is_refused_before_converting(smollm_gguf: Path, home: Path) -> None:
    result = runner.invoke(app, ["models", "import-gguf", str(smollm_gguf), "--id", "m" * 300])
    assert result.exit_code == 1, result.output
    assert "a model id may have at most 190" in result.output and "--id" in result.output
    assert "Traceback" not in result.output and isinstance(result.exception, (SystemExit, type(None)))
    assert not (home / "models").exists() or not any((home / "models").iterdir())


def test_import_of_a_garbage_file_fails_cleanly(tmp_path: Path, home: Path) -> None:
    garbage = tmp_path / "notes.gguf"
    garbage.write_bytes(b"this is not a model\n" * 100)
    result = runner.invoke(app, ["models", "import-gguf", str(garbage)])
    assert result.exit_code == 1
    assert "not a readable GGUF file" in result.output
    assert "Traceback" not in result.output
    assert runner.invoke(app, ["models", "list"]).output.startswith("no models")
    assert not (home / "models").exists() or not any((home / "models").iterdir())


def test_truncated_file_named_in_error(tmp_path: Path, smollm_gguf: Path) -> None:
    broken = copy_truncated(smollm_gguf, tmp_path / "half.gguf", 40_000_000)
    result = runner.invoke(app, ["models", "import-gguf", str(broken)])
    assert result.exit_code == 1
    assert "half.gguf" in result.output


@pytest.mark.empty_home
def test_db_upgrade_reports_the_revision(home: Path) -> None:
    result = runner.invoke(app, ["db", "upgrade"])
    assert result.exit_code == 0
    assert f"at revision {head_revision()}" in result.output
    assert (home / "mlx-manager.db").exists()


def test_probe_prints_each_step_then_the_stored_capabilities(session: Session, smollm_dir: Path) -> None:
    session.add(ModelRecord(id="smol", source=ModelSource.LOCAL, path=str(smollm_dir)))
    session.commit()
    try:
        result = runner.invoke(app, ["probe", "smol"])
    finally:
        reset_model_pool()
        reset_metal_thread()
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    for name in STEP_NAMES:  # each step announced as it starts, then its outcome
        started = lines.index(f"{name} ...")
        assert lines[started + 1].startswith(f"ok {name}: "), lines
    assert "ok unload: unloaded" in lines
    assert "capabilities of smol (stored " in result.output
    assert "  model_type            text-gen" in lines
    stored = session.get(ModelCapabilities, "smol")
    assert stored is not None and stored.practical_max_tokens is not None
    assert f"  practical_max_tokens  {stored.practical_max_tokens}" in lines


def test_probe_of_an_unknown_model_exits_1_and_names_the_command_that_lists_models(home: Path) -> None:
    result = runner.invoke(app, ["probe", "no-such-model"])
    assert result.exit_code == 1
    assert "error: no model 'no-such-model'; `mlx-manager models list`" in result.output
    assert "Traceback" not in result.output
