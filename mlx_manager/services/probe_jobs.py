"""Probes as background jobs: started from the page (or after a download), watched by any page.

A job runs `probe_model()` in an asyncio task of the app, not of a request, so closing the
browser does not stop it. Watchers wait on `changed()` and re-read the job's steps.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass, field
from functools import cache
from typing import Literal

from mlx_manager.services.downloads import CompletedDownload, add_completion_hook, remove_completion_hook
from mlx_manager.services.settings_store import AUTO_PROBE
from mlx_server.facade import APIError, ModelCapabilities, ProbeStep, probe_model

logger = logging.getLogger("mlx_manager.probe")


@dataclass
class ProbeJob:
    model_id: str
    status: Literal["running", "done", "failed"] = "running"
    steps: list[ProbeStep] = field(default_factory=list)
    error: str | None = None
    result: ModelCapabilities | None = None
    _changed: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def finished(self) -> bool:
        return self.status != "running"

    def step_rows(self) -> list[ProbeStep]:
        """The latest state of each step, in order (a step reports "running" then its result)."""
        latest: dict[str, ProbeStep] = {}
        for step in self.steps:
            latest[step.name] = step
        return list(latest.values())

    def notify(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    async def changed(self, timeout: float) -> None:
        """Return when the job changes, or after `timeout` seconds."""
        event = self._changed
        with suppress(TimeoutError):
            await asyncio.wait_for(event.wait(), timeout)


class ProbeJobs:
    def __init__(self) -> None:
        self._jobs: dict[str, ProbeJob] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    def get(self, model_id: str) -> ProbeJob | None:
        return self._jobs.get(model_id)

    def start(self, model_id: str) -> ProbeJob:
        """Start a probe; a model already being probed gets its running job back."""
        job = self._jobs.get(model_id)
        if job is not None and not job.finished:
            return job
        job = self._jobs[model_id] = ProbeJob(model_id)
        task = asyncio.create_task(self._run(job), name=f"probe {model_id}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return job

    async def _run(self, job: ProbeJob) -> None:
        def on_step(step: ProbeStep) -> None:
            job.steps.append(step)
            job.notify()

        try:
            job.result = await probe_model(job.model_id, on_step=on_step)
            job.status = "done"
        except APIError as exc:
            job.status, job.error = "failed", exc.message
        except Exception as exc:  # a job outlives its request: report, never raise into the loop
            logger.exception("probe of %s failed", job.model_id)
            job.status, job.error = "failed", f"{type(exc).__name__}: {exc}"
        job.notify()

    async def shutdown(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)


@cache
def get_probe_jobs() -> ProbeJobs:
    return ProbeJobs()


reset_probe_jobs = get_probe_jobs.cache_clear


@asynccontextmanager
async def probe_services() -> AsyncIterator[None]:
    """The app's probe jobs: fresh at start, cancelled at shutdown (before the pool unloads);
    each completed download is probed while the auto-probe setting is on."""
    reset_probe_jobs()
    add_completion_hook(probe_download, enabled_by=AUTO_PROBE)
    try:
        yield
    finally:
        remove_completion_hook(probe_download)
        await get_probe_jobs().shutdown()
        reset_probe_jobs()


async def probe_download(done: CompletedDownload) -> None:
    """Runs on the app's loop (the download manager schedules a hook's coroutine there)."""
    get_probe_jobs().start(done.model_id)
