"""`mlx-manager models add | scan | convert | set | bench`: models already on disk, conversion
to MLX, each model's defaults, and its benchmark. Merged into cli.py's `models` group; each
command works on the database directly (like `models import-gguf`), so it needs no running
server. A running server sees what it adds at once and a changed default within seconds."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table
from sqlmodel import Session

from mlx_manager.config import get_manager_settings
from mlx_manager.records import ModelBenchmark
from mlx_manager.services.local_models import added_how
from mlx_manager.services.model_benchmarks import run_benchmark
from mlx_manager.services.model_discovery import scan_models
from mlx_server.facade import (
    BENCHMARK_SIZES,
    APIError,
    BenchmarkProgress,
    ConversionProgress,
    GGUFImportError,
    ModelDefaults,
    ModelDefaultsError,
    ModelNotFoundError,
    ModelStoreError,
    ProbeStep,
    add_model,
    background_session,
    convert_model,
    expand_user,
    get_server_settings,
    list_models,
    model_defaults,
    parse_assignments,
    plan_conversion,
    probe_model,
    serving_process,
    unload_all,
    update_model_defaults,
    upgrade_database,
    use_server_settings,
)

app = typer.Typer()
console = Console(highlight=False)


def _migrate() -> None:
    use_server_settings(get_manager_settings().server_settings())
    upgrade_database()


def _session() -> Session:
    _migrate()
    return background_session()


def _fail(message: str, code: int = 1) -> typer.Exit:
    typer.secho(f"error: {message}", fg=typer.colors.RED, err=True)
    return typer.Exit(code=code)


def _probe(model_id: str) -> None:
    def step(step: ProbeStep) -> None:
        if step.status != "running":
            typer.echo(f"  {step.status} {step.name}: {step.detail}")

    typer.echo(f"probing {model_id} (--no-probe skips this; the models page can probe it later)")
    try:
        capabilities = asyncio.run(probe_model(model_id, on_step=step))
    except APIError as exc:
        raise _fail(f"the probe failed: {exc.message}") from exc
    typer.echo(f"{model_id}: {capabilities.model_type}, tools {capabilities.tool_parser_id}")


@app.command("add")
def models_add(
    path: Annotated[
        Path, typer.Argument(help="A model directory (MLX or Hugging Face layout) or a .gguf file.")
    ],
    model_id: Annotated[str | None, typer.Option("--id", help="Model id (default: from the path).")] = None,
    copy: Annotated[bool, typer.Option("--copy", help="Copy it into the models directory.")] = False,
    no_probe: Annotated[bool, typer.Option("--no-probe", help="Register it without probing it.")] = False,
) -> None:
    """Register a model already on disk where it is (nothing copied unless --copy; removing the
    model later leaves its files alone); a GGUF file is converted."""
    with _session() as session:
        try:
            record = add_model(session, path, get_server_settings().models_dir, model_id, copy=copy)
        except (ModelStoreError, GGUFImportError) as exc:
            raise _fail(str(exc)) from exc
        session.expunge(record)
    typer.echo(f"added {record.id} ({record.size_bytes / 2**20:.1f} MiB): {added_how(record)}")
    if not no_probe:
        _probe(record.id)


@app.command("scan")
def models_scan(
    folder: Annotated[
        list[Path] | None, typer.Option("--folder", help="Also search this folder (repeatable).")
    ] = None,
) -> None:
    """Models on this machine not added yet (Hugging Face cache, LM Studio, the models page's
    folders): what each is, and whether it can be added or must be converted."""
    with _session() as session:
        found = scan_models(session, tuple(expand_user(p) for p in folder or ()))
    if not found:
        typer.echo("nothing found that is not added already")
        return
    table = Table()
    for name in ("model", "where", "size", "type", "status", "path"):
        table.add_column(name, overflow="fold")  # ids and paths whole, to copy
    for item in found:
        status = f"{item.status}: {item.disk.reason}"
        model_type = str(item.disk.model_type or "-") + (" (GGUF)" if item.disk.kind == "gguf" else "")
        size = f"{item.disk.size_bytes / 2**20:.1f} MiB"
        table.add_row(item.name, item.where, size, model_type, status, str(item.path))
    console.print(table)
    typer.echo("add one with `mlx-manager models add PATH`, convert with `mlx-manager models convert PATH`")


@app.command("convert")
def models_convert(
    path: Annotated[Path, typer.Argument(help="A Hugging Face checkpoint directory (safetensors).")],
    bits: Annotated[int, typer.Option(help="4 or 8 bits per weight.")] = 4,
    group_size: Annotated[int, typer.Option(help="32, 64 or 128 weights per scale.")] = 64,
    model_id: Annotated[str | None, typer.Option("--id", help="Model id (default: NAME-<bits>bit).")] = None,
    no_probe: Annotated[bool, typer.Option("--no-probe", help="Register it without probing it.")] = False,
) -> None:
    """Quantize a checkpoint to MLX with mlx-lm's conversion, then add (and probe) it. Ctrl-C
    cancels: nothing of the conversion is kept."""
    try:
        with _session() as session:
            plan = plan_conversion(session, path, bits=bits, group_size=group_size, model_id=model_id)
    except APIError as exc:
        raise _fail(exc.message) from exc
    typer.echo(f"converting {plan.source} to {plan.model_id} ({bits}-bit, group size {group_size})")
    last: list[str] = []

    def progress(step: ConversionProgress) -> None:
        line = f"  {step.stage:<9} {step.percent:5.1f} %"
        if not last or line != last[-1]:
            typer.echo(line)
            last.append(line)

    try:
        record = asyncio.run(convert_model(plan, progress))
    except KeyboardInterrupt:
        raise _fail("cancelled; nothing of the conversion was kept", code=130) from None
    except APIError as exc:
        raise _fail(exc.message) from exc
    typer.echo(f"converted into {record.path} ({record.size_bytes / 2**20:.1f} MiB) and added as {record.id}")
    if not no_probe:
        _probe(record.id)


def _print_defaults(model_id: str, defaults: ModelDefaults) -> None:
    shown = defaults.model_dump(exclude_none=True)
    if not shown:
        typer.echo(f"{model_id}: no defaults set (requests use their own values, else the server's)")
    for key, value in shown.items():
        typer.echo(f"{key:<20}{value!r}" if key == "system_prompt" else f"{key:<20}{value}")


@app.command("set")
def models_set(
    model_id: Annotated[str, typer.Argument(help="A registered model id (`models list`).")],
    assignments: Annotated[
        list[str] | None,
        typer.Argument(
            help="KEY=VALUE: context_length, context_overflow (error|truncate), temperature, top_p, "
            "top_k, min_p, repetition_penalty, max_tokens, system_prompt, thinking (true|false); "
            "an empty VALUE clears the key. None: print the defaults."
        ),
    ] = None,
) -> None:
    """Set what the model runs with when a request leaves it out (every API and the playground)."""
    with _session() as session:
        try:
            if not assignments:
                _print_defaults(model_id, model_defaults(session, model_id))
                return
            defaults = update_model_defaults(session, model_id, parse_assignments(assignments))
        except ModelNotFoundError as exc:
            known = ", ".join(record.id for record in list_models(session)) or "none yet"
            raise _fail(f"no model {model_id!r}; the models are: {known}") from exc
        except (ModelDefaultsError, APIError) as exc:
            raise _fail(getattr(exc, "message", str(exc))) from exc
    _print_defaults(model_id, defaults)


@app.command("bench")
def models_bench(
    model_id: Annotated[str, typer.Argument(help="A registered text model id (`models list`).")],
    prompt_tokens: Annotated[int, typer.Option("--prompt-tokens", "-p", help="Prompt length.")] = (
        BENCHMARK_SIZES.prompt_tokens
    ),
    generated_tokens: Annotated[int, typer.Option("--generated-tokens", "-g", help="Tokens decoded.")] = (
        BENCHMARK_SIZES.generated_tokens
    ),
) -> None:
    """Benchmark a model in this process: prefill and decode tokens/s, time to first token and
    peak memory of a short fixed run (random prompt, greedy, after a warm-up). Kept with the
    runs the Benchmarks page shows."""
    _migrate()
    home = get_manager_settings().home.expanduser()
    if (server := serving_process(home)) is not None:
        typer.echo(
            f"note: a server (pid {server.pid}) runs on this home; it shares the machine with this run"
        )
    stages: list[str] = []

    def progress(step: BenchmarkProgress) -> None:
        if not stages or step.stage != stages[-1]:
            typer.echo(f"  {step.stage}")
            stages.append(step.stage)

    async def bench_then_unload() -> ModelBenchmark:
        # Unloaded in the run's own event loop: the model's batch belongs to it.
        try:
            return await run_benchmark(
                model_id, progress, prompt_tokens=prompt_tokens, generated_tokens=generated_tokens
            )
        finally:
            await unload_all()

    try:
        run = asyncio.run(bench_then_unload())
    except ModelNotFoundError as exc:
        raise _fail(f"no model {model_id!r}; `mlx-manager models list` shows the registered ones") from exc
    except APIError as exc:
        raise _fail(exc.message) from exc
    except KeyboardInterrupt:
        raise _fail("cancelled; nothing was kept", code=130) from None
    typer.echo(
        f"{run.model_id}: {run.prompt_tokens} prompt tokens, {run.generated_tokens} generated on {run.device}"
    )
    typer.echo(f"  prefill      {run.prefill_tokens_per_s:.1f} tok/s")
    typer.echo(f"  decode       {run.decode_tokens_per_s:.1f} tok/s")
    typer.echo(f"  first token  {run.ttft_s:.2f} s")
    typer.echo(
        f"  peak memory  {run.peak_memory_bytes / 2**20:.1f} MiB (weights {run.model_bytes / 2**20:.1f} MiB)"
    )
    typer.echo("kept; the Benchmarks page shows every run")
