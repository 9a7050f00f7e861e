"""The CLI verbs that need only the home: `ls`, `show`, and `rm` (through the running server when
there is one, which knows whether the model is loaded; else on the database directly)."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.table import Table

from mlx_manager.cli_client import KeyOption, ServerClient
from mlx_manager.cli_support import (
    CliError,
    console,
    home_session,
    parser_name,
    registered_ids,
    unknown_model,
)
from mlx_manager.config import get_manager_settings
from mlx_manager.services.local_models import delete_model, local_models
from mlx_manager.services.model_details import ModelDetails, model_details
from mlx_manager.web.templating import filesize
from mlx_server.facade import ModelStoreError, get_model, serving_process

ModelId = Annotated[str, typer.Argument(help="A model id (`mlx-manager ls`).")]


def ls() -> None:
    """Registered models: id, type, size, where they came from, whether they are probed."""
    with home_session() as session:
        models = local_models(session)
    if not models:
        console.print(
            "no models; `mlx-manager pull REPO` downloads one, `mlx-manager serve` imports the defaults"
        )
        return
    table = Table("MODEL", "TYPE", "SIZE", "SOURCE", "PROBED", "ADDED", box=None, header_style="bold")
    for model in models:
        record = model.record
        table.add_row(
            record.id,
            model.model_type,
            filesize(record.size_bytes),
            str(record.source),
            "yes" if model.capabilities else "no",
            f"{record.created_at:%Y-%m-%d}",
        )
    console.print(table)


def show(
    model_id: ModelId,
    template: Annotated[bool, typer.Option("--template", help="Print only the chat template.")] = False,
) -> None:
    """A model in full: path, type, size, parsers, capabilities, defaults and chat template."""
    with home_session() as session:
        details = model_details(session, model_id)
    if details is None:
        raise unknown_model(model_id, registered_ids())
    if template:
        console.print(details.chat_template or "(no chat template)", soft_wrap=True)
        return
    _print_details(details)


def _print_details(details: ModelDetails) -> None:
    bits = f", {details.bits}-bit" if details.bits else ""
    probed = f"probed {details.probed_at:%Y-%m-%d %H:%M} UTC" if details.probed_at else "not probed"
    rows = [
        ("path", details.path),
        ("type", f"{details.model_type} ({probed})"),
        ("family", details.family or "-"),
        ("size", f"{filesize(details.size_bytes)}{bits}"),
        ("source", f"{details.source}" + (f" ({details.origin})" if details.origin else "")),
        ("tool parser", parser_name(details.tool_parser)),
        ("thinking parser", parser_name(details.thinking_parser)),
        ("capabilities", ", ".join(details.capabilities) or "-"),
        ("practical max tokens", str(details.practical_max_tokens or "-")),
        ("draft model", details.draft_model or "-"),
        ("KV cache bits", str(details.kv_bits or "-")),
        *((f"default {key}", str(value)) for key, value in (details.defaults.stored() or {}).items()),
    ]
    table = Table(box=None, show_header=False, title=details.id, title_justify="left", title_style="bold")
    table.add_column(style="bold")
    table.add_column(overflow="fold")  # paths whole, never cut short
    for name, value in rows:
        table.add_row(name, value)
    console.print(table)
    console.print("\nchat template:", style="bold")
    console.print(details.chat_template or "(none)", soft_wrap=True)


def rm(model_id: ModelId, key: KeyOption = None) -> None:
    """Remove a model (its files when the app made them; never a folder of your own)."""
    home = get_manager_settings().server_settings().home_dir
    if serving_process(home) is None:
        console.print(_remove_here(model_id))
        return
    known = registered_ids()
    if model_id not in known:
        raise unknown_model(model_id, known)
    with ServerClient.connect(key) as client:
        removed = client.call("DELETE", client.model_path(model_id))
    console.print(removed["detail"])


def _remove_here(model_id: str) -> str:
    """No server runs: nothing has the model loaded, the database is ours to change."""
    with home_session() as session:
        if get_model(session, model_id) is None:
            raise unknown_model(model_id, registered_ids())
        try:
            return delete_model(session, model_id)
        except ModelStoreError as exc:
            raise CliError(str(exc)) from exc
