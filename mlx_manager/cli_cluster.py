"""`mlx-manager cluster add | list | remove`: the other machines this one serves models across with
(docs/DISTRIBUTED.md). The nodes live in this home's database, so these work whether or not the
server runs; every node is asked for its report, as the Cluster page does."""

from __future__ import annotations

import asyncio
from typing import Annotated

import typer
from pydantic import ValidationError
from rich.table import Table

from mlx_manager.cli_support import CliError, console, home_session, reports_errors
from mlx_manager.web.refusals import refusal_message
from mlx_manager.web.templating import filesize
from mlx_server.facade import HELP_OPTIONS, APIError, BareHelpGroup, cluster_nodes

app = typer.Typer(
    cls=BareHelpGroup,
    context_settings=HELP_OPTIONS,
    help="Other machines running MLX Manager (or mlx-server) to serve one model across.",
)


@app.command("add")
@reports_errors
def add(
    host: Annotated[str, typer.Argument(help="HOST, HOST:PORT or http://HOST:PORT (port 8080 by default).")],
    key: Annotated[str, typer.Option("--key", help="An admin API key of that node.")],
    name: Annotated[str | None, typer.Option("--name", help="Its name here (default: host name).")] = None,
) -> None:
    """Add a node: it must answer with its report, with this key, before it is stored."""
    try:
        given = cluster_nodes.NodeIn(url=host, api_key=key, name=name)
        with home_session() as session:
            view = asyncio.run(cluster_nodes.add_node(session, given))
    except (ValidationError, APIError) as exc:  # the address, the key, the node's answer
        raise CliError(refusal_message(exc)) from None
    report = view.report
    assert report is not None  # an added node has answered
    console.print(
        f"added {view.name} ({view.url}): MLX {report.mlx_version}, "
        f"{filesize(report.memory.total_bytes)} memory, {len(report.models)} models"
    )


@app.command("list")
@reports_errors
def list_() -> None:
    """The nodes, each asked for its report now (a node that does not answer says why)."""
    with home_session() as session:
        views = asyncio.run(cluster_nodes.node_views(session))
    if not views:
        console.print("no nodes; `mlx-manager cluster add HOST --key KEY` adds one")
        return
    table = Table("NAME", "URL", "STATE", "MLX", "MEMORY (budget)", "BACKENDS", "MODELS", box=None)
    for column in table.columns:
        column.overflow = "fold"  # addresses and ids whole, never cut short
    for view in views:
        report = view.report
        if report is None:
            table.add_row(view.name, view.url, "unreachable", "-", "-", "-", "-")
            continue
        memory = report.memory
        table.add_row(
            view.name,
            view.url,
            "up",
            report.mlx_version,
            f"{filesize(memory.total_bytes)} ({filesize(memory.budget_bytes)})",
            ", ".join(b for b, up in report.backends.items() if up) or "none",
            ", ".join(m.id for m in report.models) or "none",
        )
    console.print(table)
    for view in views:
        if view.error:
            console.print(f"{view.name}: {view.error}", soft_wrap=True)


@app.command("remove")
@reports_errors
def remove(name: Annotated[str, typer.Argument(help="A node's name (`mlx-manager cluster list`).")]) -> None:
    """Forget a node (nothing on it changes)."""
    with home_session() as session:
        try:
            cluster_nodes.remove_node(session, name)
        except APIError as exc:
            raise CliError(exc.message) from None
    console.print(f"removed {name}")
