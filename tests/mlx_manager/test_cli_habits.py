"""What users of command-line tools expect before anything runs: help without arguments (exit 0),
-h, --version, a .env file in the working directory; verbs that need a server say when none runs;
the verbs that need only the home (ls, show, rm) work without one."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from sqlmodel import Session
from typer.testing import CliRunner

from mlx_manager.cli import app
from mlx_manager.config import ManagerSettings
from mlx_server.cli import cli as server_cli
from mlx_server.config import MLXServerSettings
from mlx_server.database import get_engine, upgrade_database
from mlx_server.facade import __version__
from mlx_server.home_lock import ServingProcess, lock_home, serving_process
from mlx_server.records import ModelRecord, ModelSource


@pytest.mark.parametrize("args", [[], ["-h"], ["--help"], ["models"], ["keys", "-h"]])
def test_mlx_manager_prints_help_without_arguments_and_for_dash_h(args: list[str]) -> None:
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "Usage: " in result.output
    assert "Commands" in result.output


def test_the_top_level_help_lists_the_verbs() -> None:
    listed = CliRunner().invoke(app, []).output
    for verb in ("serve", "pull", "run", "ls", "ps", "show", "load", "unload", "rm"):
        assert f" {verb} " in listed, verb


@pytest.mark.parametrize("args", [[], ["-h"]])
def test_mlx_server_prints_help_without_arguments(args: list[str]) -> None:
    result = CliRunner().invoke(server_cli, args)
    assert result.exit_code == 0, result.output
    assert "serve" in result.output


def test_both_commands_print_their_version() -> None:
    assert CliRunner().invoke(app, ["--version"]).output == f"mlx-manager {__version__}\n"
    assert CliRunner().invoke(server_cli, ["--version"]).output == f"mlx-server {__version__}\n"


def test_a_dotenv_file_in_the_working_directory_configures_both(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLX_MANAGER_HOME")
    (tmp_path / ".env").write_text(
        f"MLX_MANAGER_HOME={tmp_path / 'from-dotenv'}\nMLX_MANAGER_PORT=9123\nMLX_SERVER_MAX_MODELS=2\n"
    )
    assert ManagerSettings().home == tmp_path / "from-dotenv"
    assert ManagerSettings().port == 9123
    server = MLXServerSettings()
    assert server.home == tmp_path / "from-dotenv"  # the server shares the manager's home
    assert server.max_models == 2
    monkeypatch.setenv("MLX_MANAGER_PORT", "9200")  # the environment wins
    assert ManagerSettings().port == 9200


@pytest.mark.parametrize(
    "verb", [["ps"], ["load", "x"], ["unload", "x"], ["run", "x", "hi"], ["pull", "a/b"]]
)
def test_verbs_that_need_the_server_say_none_runs(verb: list[str], home: Path) -> None:
    result = CliRunner().invoke(app, verb)
    assert result.exit_code == 1
    assert f"no server is running on the home {home}" in result.output
    assert "mlx-manager serve" in result.output


def test_the_lock_file_names_the_serving_process(home: Path) -> None:
    assert serving_process(home) is None
    with lock_home(home, "http://0.0.0.0:8123", "MLX_MANAGER_HOME"):
        found = serving_process(home)
        assert found == ServingProcess(pid=os.getpid(), url="http://0.0.0.0:8123")
        assert found.client_url == "http://127.0.0.1:8123"  # a wildcard bind is reached on loopback
    (home / "serve.lock").write_text("pid 999999999 serving http://127.0.0.1:8123")
    assert serving_process(home) is None  # its process has ended
    (home / "serve.lock").write_text(f"pid {os.getpid()} serving http://::1:8123")
    assert serving_process(home) == ServingProcess(pid=os.getpid(), url="http://[::1]:8123")


def test_ls_show_and_rm_work_without_a_server(home: Path, tmp_path: Path) -> None:
    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / "config.json").write_text('{"model_type": "llama"}')
    (folder / "tokenizer_config.json").write_text('{"chat_template": "{{ messages }}"}')
    upgrade_database()
    with Session(get_engine()) as session:
        session.add(
            ModelRecord(
                id="mine",
                source=ModelSource.LOCAL,
                path=str(folder),
                size_bytes=3 * 2**20,
                defaults={"temperature": 0.0, "context_length": 4096},
            )
        )
        session.commit()
    listed = CliRunner().invoke(app, ["ls"])
    assert listed.exit_code == 0 and "mine" in listed.output and "3.0 MiB" in listed.output
    shown = CliRunner().invoke(app, ["show", "mine"])
    assert shown.exit_code == 0, shown.output
    assert "not probed" in shown.output and "{{ messages }}" in shown.output
    assert "default temperature" in shown.output and "default context_length" in shown.output
    removed = CliRunner().invoke(app, ["rm", "mine"])
    assert removed.exit_code == 0 and "its files stay" in removed.output
    assert folder.is_dir()
    gone = CliRunner().invoke(app, ["show", "mine"])
    assert gone.exit_code == 1 and "no model is registered yet" in gone.output
