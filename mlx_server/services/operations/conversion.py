"""Convert a Hugging Face checkpoint into a quantized MLX model, registered when done.

`plan_conversion` checks everything that can be checked before work starts (the directory is a
text model's checkpoint mlx-lm supports, bits, group size, a free id), so a form or a command
fails at once with what to change. `convert_model` runs mlx-lm's conversion in a child process
(models/convert.py) into a hidden staging directory beside the models, streams its progress,
and renames the result into place only when it succeeded: a cancel (`should_stop`, or the task
cancelled) kills the child, and a failure or a cancel leaves no partial model behind.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import shutil
import sys
import tempfile
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlmodel import Session

from mlx_server.config import get_settings
from mlx_server.database import background_session
from mlx_server.errors import APIError
from mlx_server.models.detection import ModelType
from mlx_server.models.disk import directory_size, expand_user, inspect_path
from mlx_server.models.store import get_model, model_dir, suggested_model_id, validate_model_id
from mlx_server.records import ModelRecord, ModelSource
from mlx_server.utils.paths import file_or_directory

CONVERT_BITS = (4, 8)
CONVERT_GROUP_SIZES = (32, 64, 128)
STOP_POLL_S = 0.2


@dataclass(frozen=True)
class ConversionPlan:
    source: Path
    model_id: str
    bits: int
    group_size: int
    target: Path


# Where each stage starts in the whole, and its share, in percent.
_SHARES = {"load": (0.0, 2.0), "quantize": (2.0, 88.0), "save": (90.0, 9.0)}


@dataclass(frozen=True)
class ConversionProgress:
    stage: str  # load, quantize, save, register
    done: int
    total: int

    @property
    def percent(self) -> float:
        """Of the whole conversion: loading ~0, quantizing to 90 %, saving to 99 %."""
        share = self.done / self.total if self.total else 0.0
        start, span = _SHARES.get(self.stage, (99.0, 1.0))
        return round(start + span * share, 1)


def _refused(message: str, param: str = "path") -> APIError:
    return APIError(400, message, param=param, code="not_convertible")


def plan_conversion(
    session: Session, source: Path, *, bits: int, group_size: int = 64, model_id: str | None = None
) -> ConversionPlan:
    """Everything checked before a conversion starts; APIError 400/409 says what to change."""
    if bits not in CONVERT_BITS:
        raise _refused(f"bits must be 4 or 8, not {bits}.", "bits")
    if group_size not in CONVERT_GROUP_SIZES:
        raise _refused(f"group_size must be 32, 64 or 128, not {group_size}.", "group_size")
    source = expand_user(source)
    if file_or_directory(source) != "directory":
        raise _refused(f"There is no directory at {source}; give a Hugging Face checkpoint's directory.")
    found = inspect_path(source)
    if found.model_type is not None and found.model_type != ModelType.TEXT_GEN:
        kind = found.model_type
        raise _refused(f"{source} holds a model of type {kind}; mlx-lm converts text models only.")
    if not found.addable:
        raise _refused(f"{source} cannot be converted: {found.reason}.")
    if found.bits is not None:
        raise _refused(f"{source} is already an MLX model quantized to {found.bits} bits; add it as it is.")
    try:
        model_id = validate_model_id(model_id or f"{suggested_model_id(source)}-{bits}bit")
    except ValueError as exc:
        raise _refused(str(exc), "id") from None
    target = model_dir(get_settings().models_dir, model_id)
    if get_model(session, model_id) is not None or target.exists():
        message = f"A model {model_id!r} already exists; choose another id."
        raise APIError(409, message, param="id", code="model_exists")
    return ConversionPlan(source, model_id, bits, group_size, target)


async def convert_model(
    plan: ConversionPlan,
    on_progress: Callable[[ConversionProgress], None] = lambda _: None,
    should_stop: Callable[[], bool] = lambda: False,
) -> ModelRecord:
    """Run the conversion, then register the model (source "converted", origin the checkpoint).

    APIError 422 when mlx-lm fails (its message), asyncio.CancelledError when stopped."""
    plan.target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{plan.target.name}.converting-", dir=plan.target.parent))
    try:
        await _run_child(plan, staging, on_progress, should_stop)
        staging.rename(plan.target)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    on_progress(ConversionProgress("register", 0, 1))
    try:
        record = _register(plan)
    except BaseException:
        shutil.rmtree(plan.target, ignore_errors=True)
        raise
    on_progress(ConversionProgress("register", 1, 1))
    return record


def _register(plan: ConversionPlan) -> ModelRecord:
    with background_session() as session:  # the end of a conversion job, no request's
        record = ModelRecord(
            id=plan.model_id,
            source=ModelSource.CONVERTED,
            path=str(plan.target),
            size_bytes=directory_size(plan.target),
            origin=str(plan.source),
        )
        session.add(record)
        session.commit()
        session.refresh(record)
        session.expunge(record)
        return record


async def _run_child(
    plan: ConversionPlan,
    staging: Path,
    on_progress: Callable[[ConversionProgress], None],
    should_stop: Callable[[], bool],
) -> None:
    command = [sys.executable, "-m", "mlx_server.models.convert", str(plan.source), str(staging)]
    command += ["--bits", str(plan.bits), "--group-size", str(plan.group_size)]
    child = await asyncio.create_subprocess_exec(
        *command, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    assert child.stdout is not None and child.stderr is not None
    stderr_tail: deque[str] = deque(maxlen=20)
    drain = asyncio.create_task(_collect(child.stderr, stderr_tail))
    error: str | None = None
    try:
        while (line := await _next_line(child.stdout, should_stop)) is not None:
            message = _parse(line)
            if "error" in message:
                error = str(message["error"])
            elif "stage" in message:
                on_progress(
                    ConversionProgress(str(message["stage"]), int(message["done"]), int(message["total"]))
                )
        code = await child.wait()
    finally:
        if child.returncode is None:  # stopped or cancelled: the child goes at once
            child.kill()
            await child.wait()
        await asyncio.gather(drain, return_exceptions=True)
    if code != 0:
        detail = error or (stderr_tail[-1] if stderr_tail else f"exit status {code}")
        failure = f"mlx-lm could not convert {plan.source}: {detail}"
        raise APIError(422, failure, param="path", code="conversion_failed")


async def _next_line(stream: asyncio.StreamReader, should_stop: Callable[[], bool]) -> bytes | None:
    """The child's next line (None at its end); CancelledError as soon as `should_stop()`."""
    while True:
        if should_stop():
            raise asyncio.CancelledError("conversion stopped")
        with contextlib.suppress(TimeoutError):
            line = await asyncio.wait_for(stream.readline(), STOP_POLL_S)
            return line or None


async def _collect(stream: asyncio.StreamReader, tail: deque[str]) -> None:
    while line := await stream.readline():
        text = line.decode(errors="replace").strip()
        if text:
            tail.append(text)


def _parse(line: bytes) -> dict[str, Any]:
    try:
        message = json.loads(line)
    except ValueError:
        return {}
    return message if isinstance(message, dict) else {}
