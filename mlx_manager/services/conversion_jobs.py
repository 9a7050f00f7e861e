"""Conversions as background jobs (services/jobs.py): started from the models page, followed by
any page, cancelled on request; the model is registered and probed when one succeeds.

The conversion itself (a child process running mlx-lm, the staging directory renamed into place
only when done) is the server's (`convert_model`, through the facade); a job holds its progress.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Literal

from sqlmodel import Session

from mlx_manager.services.jobs import Job, JobRegistry
from mlx_server.facade import (
    APIError,
    ConversionPlan,
    ConversionProgress,
    convert_model,
    plan_conversion,
    start_arrival_probe,
)


@dataclass(eq=False)
class ConvertJob(Job[str]):
    """The conversion into a new model (`key`: its id)."""

    plan: ConversionPlan | None = None
    status: Literal["running", "done", "failed", "cancelled"] = "running"
    progress: ConversionProgress | None = None
    error: str | None = None

    @property
    def model_id(self) -> str:
        return self.key

    @property
    def percent(self) -> float:
        return self.progress.percent if self.progress is not None else 0.0

    @property
    def stage(self) -> str:
        return self.progress.stage if self.progress is not None else "starting"

    def settle(self, error: BaseException | None) -> None:
        if isinstance(error, asyncio.CancelledError):
            self.status, self.error = "cancelled", "The app stopped during the conversion; convert again."
        elif isinstance(error, APIError):
            self.status, self.error = "failed", error.message
        elif error is not None:
            self.status, self.error = "failed", f"{type(error).__name__}: {error}"
        elif self.status == "running":
            self.status = "done"


ConvertJobs = JobRegistry[str, ConvertJob]


@cache
def get_convert_jobs() -> ConvertJobs:
    return ConvertJobs()


reset_convert_jobs = get_convert_jobs.cache_clear


def start_conversion(
    session: Session, source: str, *, bits: int, group_size: int, model_id: str = ""
) -> ConvertJob:
    """Check the request (APIError says what to change), then convert in the background."""
    plan = plan_conversion(
        session, Path(source.strip()), bits=bits, group_size=group_size, model_id=model_id.strip() or None
    )
    return get_convert_jobs().start(ConvertJob(plan.model_id, plan=plan), _convert)


async def _convert(job: ConvertJob) -> None:
    assert job.plan is not None

    def on_progress(progress: ConversionProgress) -> None:
        job.progress = progress
        job.notify()

    try:
        await convert_model(job.plan, on_progress, should_stop=job.stop.is_set)
    except asyncio.CancelledError:
        if not job.stop.is_set():
            raise  # the app is stopping
        job.status, job.error = "cancelled", "Cancelled; nothing was kept."
        return
    start_arrival_probe(job.model_id)


@asynccontextmanager
async def conversion_services() -> AsyncIterator[None]:
    """For the app's lifespan: conversions still running at shutdown are stopped (their child
    killed, their staging directory removed)."""
    reset_convert_jobs()
    try:
        yield
    finally:
        await get_convert_jobs().shutdown()
        reset_convert_jobs()


def cancel_conversion(model_id: str) -> ConvertJob | None:
    """Ask the running conversion into `model_id` to stop (its child is killed, nothing kept)."""
    job = get_convert_jobs().running(model_id)
    if job is not None:
        job.stop.set()
    return job
