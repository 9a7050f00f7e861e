"""`mlx-server`: run the inference server on its own."""

from __future__ import annotations

from typing import Annotated

import typer
import uvicorn

from mlx_server.config import get_settings

cli = typer.Typer(add_completion=False, help="Standalone MLX inference server (OpenAI/Anthropic APIs).")


@cli.command()
def serve(
    host: Annotated[
        str | None, typer.Option(help="Bind address (default MLX_SERVER_HOST or 127.0.0.1).")
    ] = None,
    port: Annotated[int | None, typer.Option(help="Port (default MLX_SERVER_PORT or 8000).")] = None,
) -> None:
    """Serve the API; the database is migrated on start."""
    from mlx_server.main import create_app

    settings = get_settings()
    uvicorn.run(create_app(embedded=False), host=host or settings.host, port=port or settings.port)


def main() -> None:
    cli()
