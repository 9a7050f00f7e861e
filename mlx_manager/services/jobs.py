"""Jobs the app owns (probes, downloads, chat turns): started by a request, run in the
background, looked up and followed by any page, stopped on request, ended once.

`JobRegistry` keeps the latest job of each key, at most one running per key, and runs the work
in an asyncio task of the app (`start`) or on a worker thread (`start_in`). Whatever way the
work ends (it returns, raises, or is cancelled at shutdown), `Job.settle` sets the job's final
state and the job ends exactly once; an error is logged, never raised into the loop or the
worker. A job's `stop` is a request the work checks; `finished` and the waits say it ended.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Awaitable, Callable, Hashable
from concurrent.futures import Executor, Future
from contextlib import suppress
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

logger = logging.getLogger("mlx_manager.jobs")

K = TypeVar("K", bound=Hashable)
J = TypeVar("J", bound="Job[Any]")


class JobRunning(ValueError):
    """A job was started for a key whose job is still running."""


@dataclass(eq=False)
class Job(Generic[K]):
    """What every job has: its key, a stop request, its end, and a signal for async watchers.

    `notify()` and `changed()` belong to the app's event loop; a job run on a worker thread is
    followed through its own channel (downloads publish to subscribers), and waits with
    `wait_ended()`.
    """

    key: K
    stop: threading.Event = field(default_factory=threading.Event, repr=False)
    _ended: threading.Event = field(default_factory=threading.Event, repr=False)
    _changed: asyncio.Event = field(default_factory=asyncio.Event, repr=False)

    @property
    def finished(self) -> bool:
        return self._ended.is_set()

    def settle(self, error: BaseException | None) -> None:
        """The work returned (`error` None), raised, or was cancelled (`CancelledError`): set the
        job's final state. Called once, just before the job ends."""

    def end(self) -> None:
        self._ended.set()

    def notify(self) -> None:
        """Wake every watcher waiting in `changed()` (on the app's loop)."""
        self._changed.set()
        self._changed = asyncio.Event()

    async def changed(self, timeout: float | None = None) -> None:
        """Return when the job changes (or ends), or after `timeout` seconds."""
        event = self._changed
        with suppress(TimeoutError):
            await asyncio.wait_for(event.wait(), timeout)

    async def ended_within(self, seconds: float) -> bool:
        """Wait (on the loop) up to `seconds` for a job run by `start` to end."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + seconds
        while not self.finished and (left := deadline - loop.time()) > 0:
            await self.changed(left)
        return self.finished

    def wait_ended(self, seconds: float) -> bool:
        """Block up to `seconds` for the job to end (a worker thread's job, from another thread)."""
        return self._ended.wait(seconds)


class JobRegistry(Generic[K, J]):
    """The latest job of each key; one runs at a time per key."""

    def __init__(self) -> None:
        self._jobs: dict[K, J] = {}
        self._lock = threading.Lock()
        self._tasks: set[asyncio.Task[None]] = set()

    def get(self, key: K) -> J | None:
        return self._jobs.get(key)

    def running(self, key: K) -> J | None:
        job = self._jobs.get(key)
        return job if job is not None and not job.finished else None

    def jobs(self) -> list[J]:
        return list(self._jobs.values())

    def forget(self, key: K) -> None:
        """Drop a finished job (a running one stays)."""
        with self._lock:
            job = self._jobs.get(key)
            if job is not None and job.finished:
                del self._jobs[key]

    def start(self, job: J, work: Callable[[J], Awaitable[None]]) -> J:
        """Run `work(job)` in an asyncio task of the running loop; JobRunning if the key's job runs."""
        self._add(job)
        task = asyncio.create_task(self._run(job, work), name=f"{type(job).__name__} {job.key}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return job

    def start_in(self, executor: Executor, job: J, work: Callable[[J], None]) -> J:
        """Run `work(job)` on `executor`'s worker thread; JobRunning if the key's job runs."""
        self._add(job)
        future: Future[None] = executor.submit(self._run_here, job, work)
        future.add_done_callback(_log_crash)
        return job

    def stop_all(self) -> None:
        """Ask every running job to stop."""
        for job in self.jobs():
            job.stop.set()

    async def shutdown(self) -> None:
        """Cancel the tasks of running jobs (each settles as cancelled) and wait for them."""
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    def _add(self, job: J) -> None:
        with self._lock:
            if self.running(job.key) is not None:
                raise JobRunning(f"A {type(job).__name__} for {job.key!r} is running.")
            self._jobs[job.key] = job

    async def _run(self, job: J, work: Callable[[J], Awaitable[None]]) -> None:
        try:
            await work(job)
        except asyncio.CancelledError as exc:  # the app is shutting down
            _settle(job, exc)
            raise
        except Exception as exc:  # a job outlives its request: report, never raise into the loop
            logger.exception("%s %r failed", type(job).__name__, job.key)
            _settle(job, exc)
        else:
            _settle(job, None)
        finally:
            job.notify()

    def _run_here(self, job: J, work: Callable[[J], None]) -> None:
        try:
            work(job)
        except Exception as exc:
            logger.exception("%s %r failed", type(job).__name__, job.key)
            _settle(job, exc)
        else:
            _settle(job, None)


def _settle(job: Job[Any], error: BaseException | None) -> None:
    try:
        job.settle(error)
    finally:
        job.end()


def _log_crash(future: Future[None]) -> None:
    if not future.cancelled() and future.exception() is not None:
        logger.error("job runner failed", exc_info=future.exception())
