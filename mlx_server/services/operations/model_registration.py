"""Models added from disk while the server runs (POST /v1/admin/models, the models page), and
the probe that follows a model's arrival.

The manager starts that probe as one of its own jobs (its pages follow them), through
`set_probe_starter`; a standalone server runs it as a task of its own, cancelled at shutdown.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from pathlib import Path

from sqlmodel import Session

from mlx_server.config import get_settings
from mlx_server.errors import APIError
from mlx_server.models.gguf_import import GGUFImportError
from mlx_server.models.store import ModelIdTaken, ModelStoreError, add_model
from mlx_server.records import ModelRecord

logger = logging.getLogger("mlx_server.models")

ProbeStarter = Callable[[str], object]

_probe_starter: ProbeStarter | None = None
_probe_tasks: set[asyncio.Task[None]] = set()


def set_probe_starter(starter: ProbeStarter | None) -> None:
    """Who probes a model that just arrived (None: the server itself)."""
    global _probe_starter
    _probe_starter = starter


def start_arrival_probe(model_id: str) -> None:
    """Probe a model that was just added or converted, in the background (on the app's loop)."""
    if _probe_starter is not None:
        _probe_starter(model_id)
        return
    task = asyncio.get_running_loop().create_task(_probe(model_id), name=f"probe {model_id}")
    _probe_tasks.add(task)
    task.add_done_callback(_probe_tasks.discard)


async def _probe(model_id: str) -> None:
    from mlx_server.services.operations.probe import probe_model

    try:
        await probe_model(model_id)
    except APIError as exc:
        logger.warning("the probe of %s failed: %s", model_id, exc.message)
    except Exception:
        logger.exception("the probe of %s failed", model_id)


async def cancel_arrival_probes() -> None:
    """At shutdown: stop the server's own probes (before the pool unloads)."""
    for task in list(_probe_tasks):
        task.cancel()
    await asyncio.gather(*_probe_tasks, return_exceptions=True)


def add_error(exc: Exception) -> APIError:
    """A refused add as the API's error: 409 for a taken id or path, else 400."""
    status = 409 if isinstance(exc, ModelIdTaken) else 400
    return APIError(status, str(exc), param="path", code="model_exists" if status == 409 else "invalid_model")


async def add_model_from_disk(
    session: Session, path: str, model_id: str | None = None, *, copy: bool = False, probe: bool = True
) -> ModelRecord:
    """Register the model at `path` on this machine (store.add_model: in place unless `copy`;
    a GGUF file is converted), then probe it in the background."""

    def add() -> ModelRecord:
        record = add_model(session, Path(path), get_settings().models_dir, model_id or None, copy=copy)
        session.expunge(record)
        return record

    try:
        record = await asyncio.to_thread(add)
    except (ModelStoreError, GGUFImportError) as exc:
        raise add_error(exc) from None
    if probe:
        start_arrival_probe(record.id)
    return record
