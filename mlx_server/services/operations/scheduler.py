"""Periodic background jobs (audit retention, and the like) on the server's event loop.

One APScheduler `AsyncIOScheduler` per running app: `server_services()` in `mlx_server.main`
adds its jobs with `schedule_every()`, starts it, and `stop_scheduler()` shuts it down and
forgets it, so the next app (another event loop) starts from a fresh scheduler. Plain
functions run in the loop's thread pool, coroutine functions on the loop itself.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from contextlib import suppress
from datetime import UTC

from apscheduler.job import Job
from apscheduler.schedulers.asyncio import AsyncIOScheduler
from apscheduler.triggers.interval import IntervalTrigger

_scheduler: AsyncIOScheduler | None = None


def get_scheduler() -> AsyncIOScheduler:
    """The scheduler singleton (created on first use; `server_services()` starts it)."""
    global _scheduler
    if _scheduler is None:
        # A job that fell behind (a suspended laptop) runs once, not once per missed interval.
        _scheduler = AsyncIOScheduler(
            timezone=UTC, job_defaults={"coalesce": True, "max_instances": 1, "misfire_grace_time": None}
        )
    return _scheduler


def schedule_every(
    func: Callable[[], object] | Callable[[], Awaitable[object]], *, job_id: str, seconds: float
) -> Job:
    """Run `func` every `seconds`; adding the same `job_id` again replaces the job."""
    job: Job = get_scheduler().add_job(
        func, IntervalTrigger(seconds=seconds, timezone=UTC), id=job_id, name=job_id, replace_existing=True
    )
    return job


async def stop_scheduler() -> None:
    """Shut the running scheduler down and forget it, with its jobs."""
    global _scheduler
    scheduler, _scheduler = _scheduler, None
    if scheduler is not None and scheduler.running:
        scheduler.shutdown(wait=False)
        await asyncio.sleep(0)  # AsyncIOScheduler shuts down in a callback on its loop


def reset_scheduler() -> None:
    """For tests: forget the scheduler (shut down if its loop still runs)."""
    global _scheduler
    scheduler, _scheduler = _scheduler, None
    if scheduler is not None and scheduler.running:
        with suppress(RuntimeError):  # its loop is already closed: nothing left to stop
            scheduler.shutdown(wait=False)
