"""`mlx-server`: run the inference server on its own.

`BareHelpGroup` and `version_option` are the conventions both commands share (`mlx-manager` takes
them through the facade): no arguments print the help and exit 0, `-h` is `--help`, and
`--version` prints the installed version.
"""

from __future__ import annotations

from typing import Annotated, Any

import typer
import uvicorn
from typer.core import TyperGroup

from mlx_server import __version__
from mlx_server.config import get_settings, use_settings
from mlx_server.database import background_session, upgrade_database
from mlx_server.home_lock import HomeInUse, lock_home
from mlx_server.services.operations.api_keys import bind_refusal, keys_exist

HELP_OPTIONS: dict[str, Any] = {"help_option_names": ["-h", "--help"]}


class BareHelpGroup(TyperGroup):
    """A command group run without arguments prints its help and exits 0 (as git and ollama do),
    where click's `no_args_is_help` exits 2."""

    # ctx: typer's vendored click Context (typer._click, not a public name).
    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        if not args and not ctx.resilient_parsing:
            typer.echo(ctx.get_help(), color=ctx.color)
            ctx.exit(0)
        return super().parse_args(ctx, args)


def version_option(program: str) -> Any:
    """A `--version` option for `program`'s top-level callback: prints `program VERSION`, exits."""

    def show(value: bool) -> None:
        if value:
            typer.echo(f"{program} {__version__}")
            raise typer.Exit()

    return typer.Option("--version", is_eager=True, callback=show, help="Show the version and exit.")


cli = typer.Typer(
    cls=BareHelpGroup,
    add_completion=False,
    context_settings=HELP_OPTIONS,
    help="Standalone MLX inference server (OpenAI, Anthropic and Ollama APIs).",
)


@cli.callback()
def main_options(
    version: Annotated[bool, version_option("mlx-server")] = False,
) -> None:
    """Standalone MLX inference server (OpenAI, Anthropic and Ollama APIs); `mlx-server serve`."""


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
        with background_session() as session:
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
