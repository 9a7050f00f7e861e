"""The probe's skeleton (blueprint §10.2), the same for every model type: lease the model
("load"), run the type's checks, give the lease back, save what they found ("save"), and unload
the model unless something else wants it ("unload", also after a failed check). Each step is
reported as it starts and as it ends. The checks per type live in probe.py (text and vision),
probe_embeddings.py, probe_rerank.py and probe_audio.py; probe.py picks them by type.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Literal, TypeVar

from sqlmodel import Session

from mlx_server.database import background_session
from mlx_server.models.detection import ModelType
from mlx_server.models.loaders import LoadedModel
from mlx_server.models.pool import ModelPoolManager, get_model_pool
from mlx_server.records import ModelCapabilities

logger = logging.getLogger("mlx_server.probe")

StepStatus = Literal["running", "ok", "failed", "skipped"]
Lease = tuple[LoadedModel, Callable[[], None]]
F = TypeVar("F")


@dataclass(frozen=True)
class ProbeStep:
    """One step's progress: reported as "running", then "ok", "failed" or "skipped"."""

    name: str
    status: StepStatus
    detail: str = ""


@dataclass
class StepOutcome:
    status: StepStatus = "ok"
    detail: str = ""


class ProbeSteps:
    """Reports each step to `on_step` (a page or a terminal) and to the log."""

    def __init__(self, on_step: Callable[[ProbeStep], None] | None) -> None:
        self.on_step = on_step

    def emit(self, step: ProbeStep) -> None:
        if step.status != "running":
            logger.info("probe step %s %s: %s", step.name, step.status, step.detail)
        if self.on_step is not None:
            self.on_step(step)

    @contextmanager
    def step(self, name: str) -> Iterator[StepOutcome]:
        self.emit(ProbeStep(name, "running"))
        outcome = StepOutcome()
        try:
            yield outcome
        except BaseException as exc:
            self.emit(
                ProbeStep(name, "failed", getattr(exc, "message", None) or str(exc) or type(exc).__name__)
            )
            raise
        self.emit(ProbeStep(name, outcome.status, outcome.detail))


def pool_lease(model_id: str, model_type: ModelType) -> Callable[[], Awaitable[Lease]]:
    """A lease of `model_id` as `model_type` straight from the pool (no admission slot: a probe
    of a model that does not generate text)."""

    async def lease() -> Lease:
        pool = get_model_pool()
        loaded = await pool.acquire(model_id, model_type)
        return loaded, lambda: pool.release(loaded)

    return lease


async def run_probe(
    model_id: str,
    steps: ProbeSteps,
    *,
    lease: Callable[[], Awaitable[Lease]],
    check: Callable[[LoadedModel], Awaitable[F]],
    save: Callable[[Session, LoadedModel, F], ModelCapabilities],
) -> ModelCapabilities:
    """The skeleton: `check` runs the type's steps on the leased model and returns its findings,
    `save` stores them; nothing is stored when a step fails."""
    pool = get_model_pool()
    was_loaded = pool.get_loaded(model_id) is not None
    with steps.step("load") as outcome:
        started = time.perf_counter()
        loaded, release = await lease()
        elapsed = time.perf_counter() - started
        outcome.detail = "already loaded" if was_loaded else f"loaded in {elapsed:.1f} s"
    try:
        findings = await check(loaded)
    except BaseException:
        release()
        await _unload(pool, loaded, was_loaded, None, steps)
        raise
    release()
    with steps.step("save") as outcome, background_session() as session:
        capabilities = save(session, loaded, findings)
        outcome.detail = f"ModelCapabilities of {model_id!r} stored"
    await _unload(pool, loaded, was_loaded, capabilities, steps)
    return capabilities


async def _unload(
    pool: ModelPoolManager,
    loaded: LoadedModel,
    was_loaded: bool,
    capabilities: ModelCapabilities | None,
    steps: ProbeSteps,
) -> None:
    """Unload the model unless something else wants it; a model left loaded takes the new
    capabilities now."""
    with steps.step("unload") as outcome:
        if pool.get_loaded(loaded.model_id) is not loaded:
            outcome.status, outcome.detail = "skipped", "the pool already unloaded it"
            return
        keep = _keep_reason(loaded, was_loaded)
        if keep is None:
            await pool.unload(loaded.model_id)
            outcome.detail = "unloaded"
            return
        if capabilities is not None:
            pool.apply_capabilities(capabilities)
        outcome.status, outcome.detail = "skipped", f"left loaded: {keep}"


def _keep_reason(loaded: LoadedModel, was_loaded: bool) -> str | None:
    if loaded.pinned:
        return "it is pinned"
    if was_loaded:
        return "it was loaded before the probe"
    if loaded.active:
        return f"{loaded.active} request(s) are using it"
    return None
