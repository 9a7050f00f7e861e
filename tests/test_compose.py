"""docker-compose.dev.yml cannot run here (no Docker engine); check what it names exists."""

from __future__ import annotations

import shlex
import tomllib
from pathlib import Path

import yaml
from typer.testing import CliRunner

from mlx_manager.cli import app

ROOT = Path(__file__).resolve().parents[1]


def test_dev_compose_serves_the_manager_from_the_mounted_source() -> None:
    compose = yaml.safe_load((ROOT / "docker-compose.dev.yml").read_text())
    service = compose["services"]["mlx-manager"]

    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    command = service["command"]
    serve = command[command.index("mlx-manager serve") :].split("&&")[0].strip().rstrip('"')
    words = shlex.split(serve)
    assert words[0] in scripts
    help_text = CliRunner().invoke(app, ["serve", "--help"])
    assert help_text.exit_code == 0
    for option in (w for w in words[2:] if w.startswith("--")):
        assert option in help_text.output

    mounts = [v.split(":") for v in service["volumes"]]
    source_mount = next(m for m in mounts if m[1] == service["working_dir"])
    assert (ROOT / source_mount[0] / "pyproject.toml").is_file()
    home = service["environment"]["MLX_MANAGER_HOME"]
    assert any(m[1] == home and m[0] in compose["volumes"] for m in mounts)
