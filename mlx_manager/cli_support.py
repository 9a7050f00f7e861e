"""What the CLI's verbs share: the home's database, refusals that say what to do, the known ids."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import ParamSpec

import typer
from rich.console import Console
from sqlmodel import Session

from mlx_manager.config import get_manager_settings
from mlx_server.facade import (
    background_session,
    list_models,
    upgrade_database,
    use_server_settings,
)

P = ParamSpec("P")
MAX_IDS_SHOWN = 30

# Model output and ids are printed as they are: no markup, emoji codes or highlighting in them.
console = Console(highlight=False, markup=False, emoji=False)


class CliError(Exception):
    """A verb that cannot do what was asked; the message says why and what to do instead."""


def reports_errors(verb: Callable[P, None]) -> Callable[P, None]:
    """A verb whose CliError is printed in red on stderr and exits 1."""

    @functools.wraps(verb)
    def run(*args: P.args, **kwargs: P.kwargs) -> None:
        try:
            verb(*args, **kwargs)
        except CliError as exc:
            typer.secho(f"error: {exc}", fg=typer.colors.RED, err=True)
            raise typer.Exit(code=1) from None

    return run


@contextmanager
def home_session() -> Iterator[Session]:
    """A session on this home's database (MLX_MANAGER_HOME), migrated first."""
    use_server_settings(get_manager_settings().server_settings())
    upgrade_database()
    with background_session() as session:
        yield session


def registered_ids() -> list[str]:
    with home_session() as session:
        return [model.id for model in list_models(session)]


def unknown_model(model_id: str, known: Sequence[str]) -> CliError:
    """The refusal for an id no model has, naming the ones that exist."""
    if not known:
        return CliError(
            f"there is no model {model_id!r}: no model is registered yet "
            "(`mlx-manager pull REPO` downloads one; `mlx-manager serve` imports the default ones)"
        )
    shown = ", ".join(sorted(known)[:MAX_IDS_SHOWN])
    more = f" and {len(known) - MAX_IDS_SHOWN} more (`mlx-manager ls`)" if len(known) > MAX_IDS_SHOWN else ""
    return CliError(f"there is no model {model_id!r}; known models: {shown}{more}")


def parser_name(parser_id: str | None) -> str:
    """A parser as the probe stored it: "null" is its choice of none, None that it has not run."""
    return {None: "- (not probed)", "null": "none"}.get(parser_id, parser_id or "-")
