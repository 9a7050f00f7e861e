"""The job registry every background job uses (probes, downloads, chat turns): one running job
per key, the latest kept for lookups, work in an asyncio task or on a worker thread, each job
settled and ended exactly once whatever way its work ends."""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import pytest

from mlx_manager.services.jobs import Job, JobRegistry, JobRunning


@dataclass(eq=False)
class Counted(Job[str]):
    """A job that records how its work ended and on which thread it was settled."""

    outcomes: list[str] = field(default_factory=list)
    settled_on: str = ""

    def settle(self, error: BaseException | None) -> None:
        self.outcomes.append("done" if error is None else type(error).__name__)
        self.settled_on = threading.current_thread().name


def test_one_running_job_per_key_the_latest_kept_and_a_finished_one_forgotten() -> None:
    asyncio.run(_one_running_job_per_key())


async def _one_running_job_per_key() -> None:
    jobs = JobRegistry[str, Counted]()
    go = asyncio.Event()

    async def work(job: Counted) -> None:
        await go.wait()

    first = jobs.start(Counted("a"), work)
    with pytest.raises(JobRunning, match="'a' is running"):
        jobs.start(Counted("a"), work)
    other = jobs.start(Counted("b"), work)  # another key runs beside it
    jobs.forget("a")  # a running job is not forgotten
    assert jobs.running("a") is first and jobs.get("b") is other
    go.set()
    assert await first.ended_within(5) and await other.ended_within(5)
    assert first.outcomes == ["done"] and jobs.running("a") is None and jobs.get("a") is first
    second = jobs.start(Counted("a"), work)  # a new job once the last one ended
    assert await second.ended_within(5) and jobs.get("a") is second
    jobs.forget("a")
    assert jobs.get("a") is None and jobs.jobs() == [other]


def test_a_failing_job_is_settled_and_logged_not_raised(caplog: pytest.LogCaptureFixture) -> None:
    asyncio.run(_a_failing_job_is_settled())
    assert "Counted 'x' failed" in caplog.text and "the pool is gone" in caplog.text


async def _a_failing_job_is_settled() -> None:
    async def broken(job: Counted) -> None:
        raise RuntimeError("the pool is gone")

    job = JobRegistry[str, Counted]().start(Counted("x"), broken)
    assert await job.ended_within(5)
    assert job.outcomes == ["RuntimeError"] and job.finished


def test_watchers_wake_on_every_change_and_at_the_end() -> None:
    asyncio.run(_watchers_wake())


async def _watchers_wake() -> None:
    steps: list[int] = []
    go = asyncio.Event()

    async def work(job: Counted) -> None:
        for step in range(3):
            await go.wait()
            go.clear()
            steps.append(step)
            job.notify()

    job = JobRegistry[str, Counted]().start(Counted("w"), work)
    seen: list[int] = []
    while not job.finished:
        go.set()
        await job.changed(5)
        seen.append(len(steps))
    assert seen[:3] == [1, 2, 3] and job.outcomes == ["done"]
    await job.changed(0.01)  # an ended job's watcher returns after its timeout, not forever


def test_stop_is_a_request_the_work_sees_and_ended_within_waits_for_the_end() -> None:
    asyncio.run(_stop_is_a_request())


async def _stop_is_a_request() -> None:
    async def until_stopped(job: Counted) -> None:
        while not job.stop.is_set():
            await asyncio.sleep(0.01)

    job = JobRegistry[str, Counted]().start(Counted("s"), until_stopped)
    assert not await job.ended_within(0.05)  # still running
    job.stop.set()
    assert await job.ended_within(5) and job.outcomes == ["done"]


def test_shutdown_cancels_running_tasks_and_each_settles_as_cancelled() -> None:
    asyncio.run(_shutdown_cancels())


async def _shutdown_cancels() -> None:
    async def forever(job: Counted) -> None:
        await asyncio.Event().wait()

    jobs = JobRegistry[str, Counted]()
    job = jobs.start(Counted("forever"), forever)
    await asyncio.sleep(0)
    await jobs.shutdown()
    assert job.finished and job.outcomes == ["CancelledError"]


def test_a_worker_thread_job_settles_there_and_another_thread_can_wait_for_it() -> None:
    jobs = JobRegistry[str, Counted]()
    started, release = threading.Event(), threading.Event()

    def work(job: Counted) -> None:
        started.set()
        release.wait(5)
        if job.stop.is_set():
            raise InterruptedError("stopped")

    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="worker") as executor:
        job = jobs.start_in(executor, Counted("t"), work)
        assert started.wait(5)
        with pytest.raises(JobRunning):
            jobs.start_in(executor, Counted("t"), work)
        assert not job.wait_ended(0.05)
        jobs.stop_all()
        release.set()
        assert job.wait_ended(5)
    assert job.outcomes == ["InterruptedError"] and job.settled_on.startswith("worker")
