"""`mlx-manager pull` on the server's side: a hub download through the dashboard's download manager
(resumable, hash-checked), followed until the model has arrived and its probe has ended.

The admin API (routers/admin_api.py) starts a pull and streams its `PullState`s; the same job
shows on the models page while it runs.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Literal

from pydantic import BaseModel

from mlx_manager.records import DownloadStatus
from mlx_manager.services.download_state import DownloadEvent, DownloadState
from mlx_manager.services.downloads import get_download_manager
from mlx_manager.services.probe_jobs import ProbeJob, get_probe_jobs
from mlx_manager.services.settings_store import AUTO_PROBE, get_setting
from mlx_server.facade import background_session

# The completion hook starts the probe within milliseconds; a probe not seen by then never comes
# (the app restarted between the download and the hook).
PROBE_START_WAIT_S = 5.0
STOPPED = (DownloadStatus.FAILED, DownloadStatus.CANCELLED)

ProbeStatus = Literal["running", "done", "failed", "off", "not started"]


class PullProbe(BaseModel):
    """The probe of the arrived model: "off" when the auto-probe setting is off."""

    status: ProbeStatus
    step: str | None = None  # the step running now
    error: str | None = None


class PullState(BaseModel):
    """A pull as the CLI shows it: the download (the dashboard's row), then the probe's progress."""

    download: DownloadState
    probe: PullProbe | None = None

    @property
    def finished(self) -> bool:
        """Nothing more will happen: the download stopped, or it completed and its probe ended."""
        if self.download.active:
            return False
        return self.probe is None or self.probe.status != "running"


def start_pull(repo_id: str, revision: str = "main") -> DownloadState:
    """Resume the repo's stopped download (its row and its partial files), else queue a new one;
    an active one is returned as it is. DownloadRefused says why not."""
    manager = get_download_manager()
    revision = revision or "main"
    for job in manager.list():
        if job.repo_id == repo_id and job.revision == revision and job.status in STOPPED:
            return manager.resume(job.id)
    return manager.submit(repo_id, revision)


async def follow_pull(job_id: int) -> AsyncIterator[PullState]:
    """The pull's states as they change, until it is finished (the last one says how)."""
    manager = get_download_manager()
    loop = asyncio.get_running_loop()
    updates: asyncio.Queue[DownloadState] = asyncio.Queue()
    completed_at = [0.0]

    def on_event(event: DownloadEvent) -> None:  # on a download worker thread
        if event.state.id == job_id:
            if event.state.status == DownloadStatus.COMPLETED:
                completed_at[0] = time.monotonic()  # before the completion hooks run
            loop.call_soon_threadsafe(updates.put_nowait, event.state)

    unsubscribe = manager.subscribe(on_event)
    try:
        state = await asyncio.to_thread(manager.get, job_id)
        while state.active:
            yield PullState(download=state)
            state = await updates.get()
        if state.status != DownloadStatus.COMPLETED or state.model_id is None:
            yield PullState(download=state)
            return
        async for probe in _follow_probe(state.model_id, completed_at[0] or time.monotonic()):
            yield PullState(download=state, probe=probe)
    finally:
        unsubscribe()


async def _follow_probe(model_id: str, since: float) -> AsyncIterator[PullProbe]:
    """The probe the completion hook started for `model_id` (a job begun after `since`)."""
    with background_session() as session:
        if not get_setting(session, AUTO_PROBE):
            yield PullProbe(status="off")
            return
    jobs = get_probe_jobs()
    deadline = time.monotonic() + PROBE_START_WAIT_S
    yield PullProbe(status="running", step="starting")
    while (job := jobs.get(model_id)) is None or job.started_at < since:
        if time.monotonic() > deadline:
            yield PullProbe(status="not started")
            return
        await asyncio.sleep(0.1)
    while not job.finished:
        yield _probe_view(job)
        await job.changed(timeout=1.0)
    yield _probe_view(job)


def _probe_view(job: ProbeJob) -> PullProbe:
    running = [step.name for step in job.step_rows() if step.status == "running"]
    return PullProbe(status=job.status, step=running[-1] if running else None, error=job.error)
