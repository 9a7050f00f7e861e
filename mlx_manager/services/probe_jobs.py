"""Probes as background jobs: started from the page (or after a download), watched by any page.

A job (services/jobs.py) runs `probe_model()` in an asyncio task of the app, not of a request,
so closing the browser does not stop it. Watchers wait on `changed()` and re-read the job's steps.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass, field
from functools import cache
from typing import Literal

from mlx_manager.services.downloads import CompletedDownload, add_completion_hook, remove_completion_hook
from mlx_manager.services.jobs import Job, JobRegistry
from mlx_manager.services.settings_store import AUTO_PROBE, get_setting
from mlx_server.facade import (
    APIError,
    ModelCapabilities,
    ProbeStep,
    background_session,
    probe_model,
    set_probe_starter,
)

logger = logging.getLogger("mlx_manager.probe")


@dataclass(eq=False)
class ProbeJob(Job[str]):
    """The probe of one model (`key`: its id): the steps so far, then the result or the error."""

    status: Literal["running", "done", "failed"] = "running"
    steps: list[ProbeStep] = field(default_factory=list)
    error: str | None = None
    result: ModelCapabilities | None = None
    started_at: float = field(default_factory=time.monotonic)

    @property
    def model_id(self) -> str:
        return self.key

    def step_rows(self) -> list[ProbeStep]:
        """The latest state of each step, in order (a step reports "running" then its result)."""
        latest: dict[str, ProbeStep] = {}
        for step in self.steps:
            latest[step.name] = step
        return list(latest.values())

    def settle(self, error: BaseException | None) -> None:
        if isinstance(error, asyncio.CancelledError):
            self.status, self.error = "failed", "The app stopped during the probe; probe again."
        elif error is not None:
            self.status, self.error = "failed", f"{type(error).__name__}: {error}"
        elif self.status == "running":
            self.status = "done"


ProbeJobs = JobRegistry[str, ProbeJob]


@cache
def get_probe_jobs() -> ProbeJobs:
    return ProbeJobs()


reset_probe_jobs = get_probe_jobs.cache_clear


def start_probe(model_id: str) -> ProbeJob:
    """Start a probe; a model already being probed gets its running job back."""
    jobs = get_probe_jobs()
    return jobs.running(model_id) or jobs.start(ProbeJob(model_id), _probe)


async def _probe(job: ProbeJob) -> None:
    def on_step(step: ProbeStep) -> None:
        job.steps.append(step)
        job.notify()

    try:
        job.result = await probe_model(job.model_id, on_step=on_step)
    except APIError as exc:
        job.status, job.error = "failed", exc.message


@asynccontextmanager
async def probe_services(probe_first: Sequence[str] = ()) -> AsyncIterator[None]:
    """The app's probe jobs: fresh at start, cancelled at shutdown (before the pool unloads);
    each completed download is probed while the auto-probe setting is on, and so are the models
    in `probe_first` (the default models `serve` has just imported), one after another; each
    model added from disk or converted (also through /v1/admin/models) is probed as one of these
    jobs."""
    reset_probe_jobs()
    add_completion_hook(probe_download, enabled_by=AUTO_PROBE)
    set_probe_starter(start_probe)
    in_turn = asyncio.create_task(probe_in_turn(probe_first), name="probe at start") if probe_first else None
    try:
        yield
    finally:
        set_probe_starter(None)
        remove_completion_hook(probe_download)
        if in_turn is not None:
            in_turn.cancel()
            with suppress(asyncio.CancelledError):
                await in_turn
        await get_probe_jobs().shutdown()
        reset_probe_jobs()


async def probe_in_turn(model_ids: Sequence[str]) -> None:
    """Probe `model_ids` one at a time (each probe loads its model and runs it: side by side
    they would only share the MLX thread), while the auto-probe setting is on."""
    with background_session() as session:
        if not get_setting(session, AUTO_PROBE):
            return
    for model_id in model_ids:
        job = start_probe(model_id)
        while not job.finished:
            await job.changed()
        logger.info("probed %s: %s", model_id, job.error or job.status)


async def probe_download(done: CompletedDownload) -> None:
    """Runs on the app's loop (the download manager schedules a hook's coroutine there)."""
    start_probe(done.model_id)
