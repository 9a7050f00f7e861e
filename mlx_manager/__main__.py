"""`python -m mlx_manager`: the same as the `mlx-manager` command."""

from mlx_manager.cli import app

app()
