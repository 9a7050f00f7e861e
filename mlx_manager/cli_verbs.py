"""The verbs Ollama and LM Studio users type, registered on `mlx-manager` (cli.py): pull, run, ls,
ps, show, load, unload, rm."""

from __future__ import annotations

import typer

from mlx_manager.cli_client import load, ps, unload
from mlx_manager.cli_local import ls, rm, show
from mlx_manager.cli_pull import pull
from mlx_manager.cli_run import run
from mlx_manager.cli_support import reports_errors


def register_verbs(app: typer.Typer) -> None:
    for verb in (pull, run, ls, ps, show, load, unload, rm):
        app.command(verb.__name__)(reports_errors(verb))
