"""`mlx-server`: run the inference server on its own."""

from __future__ import annotations

from typing import Annotated

import typer
import uvicorn
from sqlmodel import Session

from mlx_server.config import get_settings, use_settings
from mlx_server.database import get_engine, upgrade_database
from mlx_server.home_lock import HomeInUse, lock_home
from mlx_server.services.operations.api_keys import bind_refusal, keys_exist

cli = typer.Typer(add_completion=False, help="Standalone MLX inference server (OpenAI/Anthropic APIs).")


@cli.command()
def serve(
    host: Annotated[
        str | None, typer.Option(help="Bind address (default MLX_SERVER_HOST or 127.0.0.1).")
    ] = None,
    port: Annotated[int | None, typer.Option(help="Port (default MLX_SERVER_PORT or 8000).")] = None,
) -> None:
    """Serve the API; the database is migrated on start. Off loopback, an API key must exist.
    One server per home: a second one on a home in use refuses to start."""
    from mlx_server.main import create_app

    settings = get_settings().model_copy(update={k: v for k, v in {"host": host, "port": port}.items() if v})
    use_settings(settings)  # the key check reads the bind address
    try:
        home_lock = lock_home(settings.home_dir, f"http://{settings.host}:{settings.port}", "MLX_SERVER_HOME")
    except HomeInUse as exc:
        typer.secho(f"error: {exc}", fg=typer.colors.RED, err=True)
        raise typer.Exit(code=2) from None
    with home_lock:
        upgrade_database()
        with Session(get_engine()) as session:
            refusal = bind_refusal(settings.host, has_key=keys_exist(session), has_password=False)
        if refusal:
            typer.secho(f"error: {refusal}", fg=typer.colors.RED, err=True)
            raise typer.Exit(code=2)
        uvicorn.run(
            create_app(embedded=False),
            host=settings.host,
            port=settings.port,
            **settings.proxy_header_options(),
        )


def main() -> None:
    cli()
