"""One dedicated thread owns all MLX work (blueprint §8).

Metal command queues have thread affinity, and one thread also makes requests queue
fairly (FIFO) instead of contending for the GPU. Async callers submit a function, or a
generator factory whose items are produced one job per item; a held stream (the continuous
batch) keeps the thread from item to item while no other job waits, and gives it up after the
current item when one does. The MLX cache is cleared after every function job and at the end of
every stream; an abandoned stream stops at the next item.

A stream's generator belongs to the thread: it is created, advanced and closed there only.
mlx-lm's `generate_step` holds an `mx.stream(...)` context across its yields, and MLX refuses
to leave that context on another thread ("[StreamContext] Destroyed in a different thread"),
so a generator closed or collected anywhere else reports that error and skips its cleanup.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import secrets
import threading
import time
import weakref
from collections.abc import AsyncGenerator, Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

import mlx.core as mx

T = TypeVar("T")

_DONE = object()
_PAUSED = object()  # a held stream's job gave the thread up: another job was waiting
# A fair stream giving way checks this often whether the others have had their time, and stops
# waiting once the thread has been idle this long (nobody else wants it).
GIVE_WAY_POLL_SECONDS = 0.01
IDLE_GAP_SECONDS = 0.05


@dataclass(frozen=True)
class _Raised:
    """A held stream's generator failed on the MLX thread with `error`."""

    error: BaseException


class _Consumer:
    """Stands for a stream's async side: when it is collected, the stream is over."""


class MetalThread:
    def __init__(self) -> None:
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="mlx-metal")
        # The streams' generators that are open, by stream; touched on the MLX thread only.
        self._open: dict[int, Iterator[Any]] = {}
        self._keys = itertools.count()
        # Jobs submitted and not started yet: a held stream gives the thread up when one waits.
        self._waiting = 0
        self._waiting_lock = threading.Lock()
        # The thread's busy time (finished jobs), when the running job started (None: idle), and
        # since when it has been idle: what a fair stream gives way by.
        self._busy_seconds = 0.0
        self._job_started: float | None = None
        self._idle_since = time.perf_counter()

    def _submit(self, fn: Callable[[], T]) -> Future[T]:
        with self._waiting_lock:
            self._waiting += 1

        def job() -> T:
            with self._waiting_lock:
                self._waiting -= 1
                self._job_started = time.perf_counter()
            try:
                return fn()
            except BaseException:
                heal_random_key()
                raise
            finally:
                with self._waiting_lock:
                    self._idle_since = time.perf_counter()
                    self._busy_seconds += self._idle_since - (self._job_started or self._idle_since)
                    self._job_started = None

        future = self._executor.submit(job)
        future.add_done_callback(self._forget_if_cancelled)
        return future

    def _forget_if_cancelled(self, future: Future[Any]) -> None:
        """A job cancelled before it started (its awaiting request was cancelled: a client that
        left while queued) never runs: it waits no longer. Counted still, it would make a held
        batch give the thread up after every step, and a fair stream wait forever for others."""
        if future.cancelled():
            with self._waiting_lock:
                self._waiting -= 1

    def busy_seconds(self) -> float:
        """Seconds the thread has spent running jobs, the running one's so far included."""
        with self._waiting_lock:
            running = 0.0 if self._job_started is None else time.perf_counter() - self._job_started
            return self._busy_seconds + running

    def _idle_for(self, seconds: float) -> bool:
        """Whether no job has run or waited for the last `seconds`."""
        with self._waiting_lock:
            idle = self._job_started is None and not self._waiting
            return idle and time.perf_counter() - self._idle_since >= seconds

    async def _give_way(self, seconds: float) -> None:
        """Wait until other jobs have had the thread for `seconds`, or it has fallen idle."""
        start = self.busy_seconds()
        while self.busy_seconds() - start < seconds and not self._idle_for(IDLE_GAP_SECONDS):
            await asyncio.sleep(GIVE_WAY_POLL_SECONDS)

    async def run(self, fn: Callable[[], T]) -> T:
        """Run `fn` on the MLX thread and return its result (or raise its exception)."""

        def job() -> T:
            try:
                return fn()
            finally:
                mx.clear_cache()

        return await asyncio.wrap_future(self._submit(job))

    async def stream(
        self, make_items: Callable[[], Iterator[T]], *, hold: bool = False, fair: bool = False
    ) -> AsyncGenerator[T, None]:
        """Iterate `make_items()` on the MLX thread, yielding each item here.

        By default one job per item: concurrent streams interleave token by token in arrival
        order, so a long generation does not hold off the next request until it ends. With
        `hold`, a job goes on from item to item while no other job waits (the continuous batch:
        its steps then follow each other without a round trip through the event loop per token)
        and ends after the current item when one does. With `fair` (items that each take long:
        a transcription's windows), when other work was waiting or under way as an item ended,
        the next item waits until that work has had the thread for as long as the item took
        (or the thread falls idle): a held batch then runs that long between two items, instead
        of one step. Closing the async iterator early (a client disconnect) closes the generator
        in the next job and frees the thread; a stream whose first job has not started yet
        never starts.
        """
        key = next(self._keys)
        turn = [0.0]  # a fair stream's last item: seconds, when others wanted the thread

        def step() -> object:
            started = time.perf_counter()
            try:
                items = self._open.get(key)
                if items is None:
                    items = self._open[key] = make_items()
                item = next(items, _DONE)
            except BaseException:
                self._open.pop(key, None)  # the error ended the generator
                raise
            if item is _DONE:
                del self._open[key]
            contended = self._waiting > 0 or len(self._open) > (0 if item is _DONE else 1)
            turn[0] = time.perf_counter() - started if contended else 0.0
            return item

        # However the async side ends (finished, closed, cancelled, or collected without its
        # finally running), the generator is closed by a job on the MLX thread, once.
        consumer = _Consumer()
        close = weakref.finalize(consumer, self._close_later, key)
        close.atexit = False  # at exit, shutdown() closes what is open
        try:
            if hold:
                async with contextlib.aclosing(self._held(step)) as held:  # stops its job at once
                    async for item in held:
                        yield item  # type: ignore[misc]  # every item but the markers is a T
            else:
                while (item := await asyncio.wrap_future(self._submit(step))) is not _DONE:
                    yield item  # type: ignore[misc]  # every item but _DONE is a T from make_items
                    if fair and turn[0] > 0:
                        await self._give_way(turn[0])
        finally:
            # Queued, not awaited: a cancelled or collected consumer cannot wait for it, and the
            # executor runs it right after the step in flight.
            close()

    async def _held(self, step: Callable[[], object]) -> AsyncGenerator[object, None]:
        """`step()`'s items, from jobs that each run steps while no other job waits; the items
        reach the event loop as they come, through a queue."""
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[object] = asyncio.Queue()
        stop = threading.Event()  # the consumer is gone: the job in flight ends after its item

        def post(value: object) -> None:
            with contextlib.suppress(RuntimeError):  # the loop is closed: nobody listens any more
                loop.call_soon_threadsafe(queue.put_nowait, value)

        def steps_while_alone() -> None:
            try:
                while not stop.is_set():
                    item = step()
                    post(item)
                    if item is _DONE:
                        return
                    if self._waiting:
                        break
                post(_PAUSED)
            except BaseException as exc:  # the generator's error, raised on the consumer's side
                heal_random_key()
                post(_Raised(exc))

        self._submit(steps_while_alone)
        try:
            while (value := await queue.get()) is not _DONE:
                if value is _PAUSED:
                    self._submit(steps_while_alone)  # behind the job that was waiting
                elif isinstance(value, _Raised):
                    raise value.error
                else:
                    yield value
        finally:
            stop.set()

    def _close_later(self, key: int) -> None:
        """Queue the close of stream `key`'s generator. After shutdown() there is nothing to do:
        shutdown closed every open generator on the thread."""
        with contextlib.suppress(RuntimeError):  # executor already shut down
            self._submit(lambda: self._close(key))

    def _close(self, key: int) -> None:
        """On the MLX thread: close the stream's generator (if still open) and clear the cache."""
        try:
            items = self._open.pop(key, None)
            close_items = getattr(items, "close", None)
            if close_items is not None:
                close_items()
        finally:
            mx.clear_cache()

    def _close_all(self) -> None:
        for key in list(self._open):
            with contextlib.suppress(Exception):  # one generator's cleanup does not stop the rest
                self._close(key)

    def shutdown(self) -> None:
        """Finish queued jobs, close the streams still open, then release the thread's MLX
        streams, all on the thread itself.

        MLX keeps per-thread stream state (mlx-lm generates on a thread-local stream); if the
        thread ends with it alive, the process aborts at exit ("terminate called without an
        active exception"), so every MetalThread is shut down this way before threads join.
        """
        with contextlib.suppress(RuntimeError):  # already shut down
            self._submit(self._close_all)  # counted as waiting: a held stream gives the thread up
            self._submit(_release_thread_streams)
        self._executor.shutdown(wait=True)


def heal_random_key() -> None:
    """Give this thread a fresh random key if an exception left it unusable (call on the thread).

    `mx.compile` swaps the calling thread's random key for a tracer while it traces a function
    that captures `mx.random.state` (mlx-lm's top-k / top-p / min-p filters, Whisper's sampler);
    an exception during that trace leaves the tracer in place, and every later draw from the
    key fails with "[eval] Attempting to eval an array without a primitive". On the MLX thread
    that is every request after the one that failed: a chat with `top_k` over the vocabulary
    broke the next transcription whose Whisper fell back to sampling. Requests' own sampling
    uses keys of their own (`seed`), so a new global key changes no reproducible result.
    """
    try:
        mx.eval(mx.random.state)
    except RuntimeError:
        mx.random.seed(secrets.randbits(63))


def _release_thread_streams() -> None:
    mx.synchronize()
    mx.clear_streams()


_metal_thread: MetalThread | None = None


def get_metal_thread() -> MetalThread:
    global _metal_thread
    if _metal_thread is None:
        _metal_thread = MetalThread()
    return _metal_thread


def _shutdown_at_exit() -> None:
    if _metal_thread is not None:
        _metal_thread.shutdown()


# Runs before the interpreter joins threads (and before concurrent.futures stops its workers,
# which registered earlier: these hooks run in reverse order), so the shutdown job still runs.
threading._register_atexit(_shutdown_at_exit)  # type: ignore[attr-defined]


def reset_metal_thread() -> None:
    global _metal_thread
    if _metal_thread is not None:
        _metal_thread.shutdown()
    _metal_thread = None


async def run_on_metal_thread(fn: Callable[[], T]) -> T:
    return await get_metal_thread().run(fn)


def stream_on_metal_thread(
    make_items: Callable[[], Iterator[T]], *, hold: bool = False, fair: bool = False
) -> AsyncGenerator[T, None]:
    return get_metal_thread().stream(make_items, hold=hold, fair=fair)
