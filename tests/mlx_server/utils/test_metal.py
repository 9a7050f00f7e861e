"""The MLX thread runner: one thread, FIFO jobs, errors propagate, abandoned streams stop, and a
stream's generator is closed on the MLX thread however its consumer goes away."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import itertools
import sys
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import mlx.core as mx
import pytest
from mlx_lm import stream_generate
from mlx_lm.generate import generate_step
from mlx_lm.sample_utils import apply_top_k, make_sampler

from mlx_server.utils.metal import MetalThread


@pytest.fixture
def runner() -> Iterator[MetalThread]:
    metal = MetalThread()
    yield metal
    metal.shutdown()


def test_every_job_runs_on_the_same_dedicated_thread(runner: MetalThread) -> None:
    async def main() -> set[int]:
        idents = await asyncio.gather(*(runner.run(threading.get_ident) for _ in range(5)))
        return set(idents)

    idents = asyncio.run(main())
    assert len(idents) == 1
    assert idents != {threading.get_ident()}


def test_exceptions_reach_the_caller_with_their_type(runner: MetalThread) -> None:
    def fails() -> None:
        raise ValueError("bad shape")

    with pytest.raises(ValueError, match="bad shape"):
        asyncio.run(runner.run(fails))


@pytest.mark.parametrize("hold", [False, True])
def test_stream_yields_in_order_then_raises_the_generators_error(runner: MetalThread, hold: bool) -> None:
    def items() -> Iterator[int]:
        yield from range(3)
        raise RuntimeError("out of memory")

    async def main() -> list[int]:
        seen = []
        with pytest.raises(RuntimeError, match="out of memory"):
            async for item in runner.stream(items, hold=hold):
                seen.append(item)
        return seen

    assert asyncio.run(main()) == [0, 1, 2]


def test_mlx_cache_is_cleared_after_each_job(runner: MetalThread) -> None:
    def allocate() -> float:
        a = mx.ones((512, 512)) * 2
        mx.eval(a)
        del a
        return float(mx.get_cache_memory())

    cached_inside = asyncio.run(runner.run(allocate))
    assert cached_inside > 0
    assert asyncio.run(runner.run(mx.get_cache_memory)) == 0


def test_concurrent_streams_take_turns_item_by_item(runner: MetalThread) -> None:
    def letters(tag: str) -> Iterator[str]:
        for i in range(5):
            time.sleep(0.01)
            yield f"{tag}{i}"

    order: list[str] = []

    async def consume(tag: str) -> None:
        async for item in runner.stream(lambda: letters(tag)):
            order.append(item)

    async def main() -> None:
        await asyncio.gather(consume("a"), consume("b"))

    asyncio.run(main())
    # Each stream keeps its own order, and neither waits for the other to finish.
    assert [x for x in order if x[0] == "a"] == [f"a{i}" for i in range(5)]
    assert [x for x in order if x[0] == "b"] == [f"b{i}" for i in range(5)]
    assert order.index("b0") < order.index("a4")
    assert order.index("a1") < order.index("b4")


def test_a_held_stream_goes_on_from_item_to_item_without_waiting_for_its_consumer(
    runner: MetalThread,
) -> None:
    made_at: list[float] = []

    def items() -> Iterator[int]:
        for i in range(5):
            made_at.append(time.monotonic())
            yield i

    async def main() -> list[tuple[int, float]]:
        taken = []
        async for item in runner.stream(items, hold=True):
            taken.append((item, time.monotonic()))
            await asyncio.sleep(0.05)  # a slow consumer
        return taken

    taken = asyncio.run(main())
    assert [item for item, _ in taken] == list(range(5))
    # All five were made before the consumer took its third: no job per item, no round trip.
    assert made_at[-1] < taken[2][1]


def test_a_held_stream_lets_a_waiting_job_run_after_its_current_item(runner: MetalThread) -> None:
    def slow_items() -> Iterator[int]:
        for i in range(50):
            time.sleep(0.01)  # a batch step
            yield i

    async def main() -> tuple[int, list[int]]:
        seen: list[int] = []

        async def consume() -> None:
            async for item in runner.stream(slow_items, hold=True):
                seen.append(item)

        consumer = asyncio.ensure_future(consume())
        while not seen:
            await asyncio.sleep(0.005)
        await runner.run(lambda: None)  # an embedding request, say
        taken_when_it_ran = len(seen)
        await consumer
        return taken_when_it_ran, seen

    taken_when_it_ran, seen = asyncio.run(main())
    assert seen == list(range(50))  # the stream went on after the job
    assert taken_when_it_ran < 10  # the job waited for an item or two, not for the 50


WINDOW_S = 0.2  # a transcription window's job (seconds on a real CPU)
STEP_S = 0.005  # a batch step


def _fair_and_held(runner: MetalThread, windows: int) -> tuple[list[float], list[float]]:
    """A fair stream of `windows` slow items beside a held stream of quick steps (a chat's batch)
    that runs until the windows are over; the times each window and each step ended."""
    window_ends: list[float] = []
    step_ends: list[float] = []
    over = threading.Event()

    def transcription() -> Iterator[int]:
        for i in range(windows):
            time.sleep(WINDOW_S)
            window_ends.append(time.monotonic())
            yield i
        over.set()

    def batch() -> Iterator[int]:
        while not over.is_set():
            time.sleep(STEP_S)
            step_ends.append(time.monotonic())
            yield len(step_ends)

    async def main() -> None:
        async def chat() -> None:
            async for _ in runner.stream(batch, hold=True):
                pass

        async def transcribe() -> None:
            async for _ in runner.stream(transcription, fair=True):
                pass

        await asyncio.gather(chat(), transcribe())

    asyncio.run(main())
    return window_ends, step_ends


def test_a_fair_stream_gives_a_held_batch_as_long_as_each_window_took(runner: MetalThread) -> None:
    """Between two windows of a transcription, a running chat's batch gets the thread for about a
    window's time (many steps), not for one step: a long file holds chats back by one window."""
    window_ends, step_ends = _fair_and_held(runner, windows=4)
    between = [
        sum(1 for t in step_ends if before < t < after) for before, after in itertools.pairwise(window_ends)
    ]
    # ~40 steps fit in a window's time; before, the batch got one step per window.
    assert all(steps >= 0.5 * WINDOW_S / STEP_S for steps in between), between
    # And the windows still get their half: the transcription is slowed, not starved.
    assert window_ends[-1] - window_ends[0] < 3 * 2 * WINDOW_S * 1.5


def test_a_fair_stream_alone_runs_its_items_back_to_back(runner: MetalThread) -> None:
    def windows() -> Iterator[float]:
        for _ in range(4):
            time.sleep(WINDOW_S)
            yield time.monotonic()

    async def main() -> list[float]:
        return [end async for end in runner.stream(windows, fair=True)]

    ends = asyncio.run(main())
    assert ends[-1] - ends[0] < 3 * WINDOW_S + 0.15  # no waiting for others that are not there


def test_mlx_cache_is_cleared_when_a_stream_ends(runner: MetalThread) -> None:
    def allocations() -> Iterator[float]:
        for _ in range(2):
            a = mx.ones((512, 512)) * 2
            mx.eval(a)
            del a
            yield float(mx.get_cache_memory())

    async def main() -> tuple[list[float], float]:
        inside = [x async for x in runner.stream(allocations)]
        return inside, await runner.run(mx.get_cache_memory)

    inside, after = asyncio.run(main())
    assert inside[-1] > 0
    assert after == 0


@pytest.mark.parametrize("hold", [False, True])
def test_abandoned_model_stream_frees_the_thread_within_two_seconds(
    runner: MetalThread, smollm: tuple[Any, Any], hold: bool
) -> None:
    model, tokenizer = smollm
    prompt = tokenizer.apply_chat_template(
        [{"role": "user", "content": "Tell me a long story."}], add_generation_prompt=True, tokenize=False
    )
    produced: list[str] = []

    def generate() -> Iterator[str]:
        for response in stream_generate(
            model, tokenizer, prompt, max_tokens=200, sampler=make_sampler(temp=0.0)
        ):
            produced.append(response.text)
            yield response.text

    async def main() -> float:
        stream = runner.stream(generate, hold=hold)
        received = []
        async for text in stream:
            received.append(text)
            if len(received) == 3:
                break
        await stream.aclose()  # what a server does when the client disconnects
        started = time.monotonic()
        await runner.run(lambda: None)
        return time.monotonic() - started

    waited = asyncio.run(main())
    assert waited < 2.0
    assert len(produced) < 20  # generation stopped within a few tokens, far from max_tokens


def test_stream_abandoned_while_queued_never_starts_its_work(runner: MetalThread) -> None:
    started: list[bool] = []

    def make_items() -> Iterator[int]:
        started.append(True)  # stands for the prefill a real request would run here
        return iter([1])

    async def main() -> None:
        busy = asyncio.ensure_future(runner.run(lambda: time.sleep(0.3)))
        stream = runner.stream(make_items)
        waiting = asyncio.ensure_future(anext(stream))
        await asyncio.sleep(0.05)
        waiting.cancel()  # the client disconnects while its request is still queued
        with contextlib.suppress(asyncio.CancelledError):
            await waiting
        await busy
        await runner.run(lambda: None)  # by now the queued job has had its turn

    asyncio.run(main())
    assert started == []


def test_a_request_cancelled_while_queued_leaves_no_one_waiting(runner: MetalThread) -> None:
    """After a client left while its request was queued, a transcription's windows (a fair
    stream) still run back to back: before, they waited for that request's turn forever."""

    def windows() -> Iterator[float]:
        for _ in range(3):
            time.sleep(WINDOW_S)
            yield time.monotonic()

    async def main() -> list[float]:
        busy = asyncio.ensure_future(runner.run(lambda: time.sleep(0.3)))
        waiting = asyncio.ensure_future(runner.run(lambda: None))
        await asyncio.sleep(0.05)
        waiting.cancel()  # the client disconnects while its request is still queued
        with contextlib.suppress(asyncio.CancelledError):
            await waiting
        await busy
        return await asyncio.wait_for(_ends(runner.stream(windows, fair=True)), timeout=30)

    ends = asyncio.run(main())
    # Without waiting for a job that will never run (before: until the 30 s above ran out); the
    # margin is for a loaded machine, the wait was unbounded.
    assert ends[-1] - ends[0] < 10 * WINDOW_S


async def _ends(stream: AsyncIterator[float]) -> list[float]:
    return [end async for end in stream]


def _story_steps(smollm: tuple[Any, Any], closed_on: list[str]) -> Callable[[], Iterator[int]]:
    """A real generation (mlx-lm's generate_step, which holds an mx.stream context across its
    yields) that records the thread it was closed on."""
    model, tokenizer = smollm
    prompt = tokenizer.encode("Once upon a time")  # a short prefill: what matters is the close

    def steps() -> Iterator[int]:
        try:
            for token, _ in generate_step(mx.array(prompt), model, max_tokens=20):
                yield token
        finally:
            closed_on.append(threading.current_thread().name)

    return steps


@pytest.fixture
def unraisable(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Errors Python could only report (e.g. MLX's "[StreamContext] Destroyed in a different
    thread" from a generator finalized on the wrong thread)."""
    seen: list[str] = []
    monkeypatch.setattr(sys, "unraisablehook", lambda u: seen.append(f"{u.exc_value!r} in {u.object!r}"))
    return seen


@pytest.mark.parametrize("hold", [False, True])
def test_a_generation_still_open_at_shutdown_is_closed_on_the_mlx_thread(
    smollm: tuple[Any, Any], unraisable: list[str], hold: bool
) -> None:
    runner, closed_on = MetalThread(), list[str]()

    async def main() -> None:
        stream = runner.stream(_story_steps(smollm, closed_on), hold=hold)
        await anext(stream)
        runner.shutdown()  # the process exits while a client still streams
        await stream.aclose()

    asyncio.run(main())
    gc.collect()
    assert closed_on == ["mlx-metal_0"] and unraisable == []


@pytest.mark.parametrize("hold", [False, True])
def test_a_stream_dropped_without_its_finally_is_closed_on_the_mlx_thread(
    runner: MetalThread, smollm: tuple[Any, Any], unraisable: list[str], hold: bool
) -> None:
    closed_on: list[str] = []

    async def abandon() -> None:
        # A loop whose async-generator finalizer does not close what it is given (as a loop
        # that is already closed): the stream's own finally never runs.
        sys.set_asyncgen_hooks(finalizer=lambda agen: None)
        stream = runner.stream(_story_steps(smollm, closed_on), hold=hold)
        await anext(stream)
        del stream
        gc.collect()

    async def next_job() -> int:
        return await runner.run(lambda: 1)

    asyncio.run(abandon())
    assert asyncio.run(next_job()) == 1  # the close job ran before this one
    assert closed_on == ["mlx-metal_0"] and unraisable == []


def test_a_failed_trace_leaves_the_threads_random_key_usable(runner: MetalThread) -> None:
    """The attack behind the 500 "[eval] Attempting to eval an array without a primitive": a chat
    whose top_k exceeded the vocabulary made mlx-lm's compiled filter raise mid-trace, which left
    the MLX thread's random key a tracer; the next transcription whose Whisper fell back to
    sampling (silence does) failed on it, and so would every later one."""

    def too_many() -> None:
        apply_top_k(mx.zeros((1, 10)), 10**12)

    def draw() -> int:
        value: int = mx.random.categorical(mx.zeros((1, 10))).item()  # type: ignore[assignment]
        return value

    async def main() -> int:
        with pytest.raises(ValueError, match="top_k"):
            await runner.run(too_many)
        return await runner.run(draw)

    assert 0 <= asyncio.run(main()) < 10
