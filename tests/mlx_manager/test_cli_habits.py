"""What users of command-line tools expect before anything runs: help without arguments (exit 0),
-h, --version, and a .env file in the working directory."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from mlx_manager.cli import app
from mlx_manager.config import ManagerSettings
from mlx_server.cli import cli as server_cli
from mlx_server.config import MLXServerSettings
from mlx_server.facade import __version__


@pytest.mark.parametrize("args", [[], ["-h"], ["--help"], ["models"], ["keys", "-h"]])
def test_mlx_manager_prints_help_without_arguments_and_for_dash_h(args: list[str]) -> None:
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "Usage: " in result.output
    assert "Commands" in result.output


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
