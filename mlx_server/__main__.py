"""`python -m mlx_server`: the same as the `mlx-server` command."""

from mlx_server.cli import main

main()
