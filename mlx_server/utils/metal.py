"""One dedicated thread owns all MLX work (blueprint §8).

Metal command queues have thread affinity, and one thread also makes requests queue
fairly (FIFO) instead of contending for the GPU. Async callers submit a function, or a
generator factory whose items are streamed back through an asyncio queue. The MLX cache is
cleared after every job, and an abandoned stream stops its generator at the next item.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncGenerator, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

import mlx.core as mx

T = TypeVar("T")

_DONE = object()


class MetalThread:
    def __init__(self) -> None:
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="mlx-metal")

    async def run(self, fn: Callable[[], T]) -> T:
        """Run `fn` on the MLX thread and return its result (or raise its exception)."""

        def job() -> T:
            try:
                return fn()
            finally:
                mx.clear_cache()

        return await asyncio.get_running_loop().run_in_executor(self._executor, job)

    async def stream(self, make_items: Callable[[], Iterator[T]]) -> AsyncGenerator[T, None]:
        """Iterate `make_items()` on the MLX thread, yielding each item here as it is produced.

        Closing the async iterator early (a client disconnect) stops the generator before
        its next item, which frees the thread for the next queued job.
        """
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[object] = asyncio.Queue()
        abandoned = threading.Event()

        def put(item: object) -> None:
            try:
                loop.call_soon_threadsafe(queue.put_nowait, item)
            except RuntimeError:  # the event loop is gone, and with it the consumer
                abandoned.set()

        def job() -> None:
            if abandoned.is_set():  # the client left while this job waited its turn
                put(_DONE)
                return
            items = make_items()
            try:
                for item in items:
                    if abandoned.is_set():
                        break
                    put(item)
            except BaseException as exc:  # handed to the consumer, raised there
                put(_Failure(exc))
            finally:
                close = getattr(items, "close", None)
                if close is not None:
                    close()
                mx.clear_cache()
                put(_DONE)

        loop.run_in_executor(self._executor, job)
        try:
            while (item := await queue.get()) is not _DONE:
                if isinstance(item, _Failure):
                    raise item.exc
                yield item  # type: ignore[misc]  # every other item is a T from make_items
        finally:
            abandoned.set()

    def shutdown(self) -> None:
        self._executor.shutdown(wait=True, cancel_futures=True)


class _Failure:
    def __init__(self, exc: BaseException) -> None:
        self.exc = exc


_metal_thread: MetalThread | None = None


def get_metal_thread() -> MetalThread:
    global _metal_thread
    if _metal_thread is None:
        _metal_thread = MetalThread()
    return _metal_thread


def reset_metal_thread() -> None:
    global _metal_thread
    if _metal_thread is not None:
        _metal_thread.shutdown()
    _metal_thread = None


async def run_on_metal_thread(fn: Callable[[], T]) -> T:
    return await get_metal_thread().run(fn)


def stream_on_metal_thread(make_items: Callable[[], Iterator[T]]) -> AsyncGenerator[T, None]:
    return get_metal_thread().stream(make_items)
