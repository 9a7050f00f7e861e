"""Chat turns as jobs: start → running → done / stopped / failed / interrupted; followers that
attach late get the turn so far, then the rest; one turn at a time per conversation.

The work here writes to the job as the runner does (services/chat_runner.py, tested with the
real model in tests/mlx_manager/routers/test_chat.py), at a pace the test controls.
"""

from __future__ import annotations

import asyncio

import pytest

from mlx_manager.services.chat_jobs import ChatJob, ChatJobs, Update, follow
from mlx_manager.services.jobs import JobRunning


class Pace:
    """Work that appends the words it is given, one per `step()`, then ends."""

    def __init__(self, words: list[str]) -> None:
        self.words = words
        self.go = asyncio.Event()

    def step(self) -> None:
        self.go.set()

    async def __call__(self, job: ChatJob) -> None:
        job.say("started")
        for word in self.words:
            await self.go.wait()
            self.go.clear()
            if job.stop.is_set():
                return
            job.appended("content", word)


async def _collect(job: ChatJob, shown: list[str]) -> list[Update]:
    """Follow the job as a page does; `shown` is the text on that page (snapshots replace it)."""
    updates: list[Update] = []
    async for kind, text in follow(job):
        updates.append((kind, text))
        if kind == "turn":  # a snapshot: what the job holds now
            shown[:] = ["".join(t for k, t in job.log if k == "content")]
        elif kind == "content":
            shown.append(text)
    return updates


async def _settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


def test_a_turn_runs_to_done_and_a_late_follower_gets_what_is_there_then_the_rest() -> None:
    asyncio.run(_a_turn_runs_to_done_and_a_late_follower_gets_what_is_there_then_the_rest())


async def _a_turn_runs_to_done_and_a_late_follower_gets_what_is_there_then_the_rest() -> None:
    jobs, work = ChatJobs(), Pace(["Once ", "upon ", "a ", "time."])
    job = jobs.start(ChatJob(1), work)
    early: list[str] = []
    first = asyncio.create_task(_collect(job, early))
    await _settle()
    work.step()
    await _settle()
    work.step()
    await _settle()
    late: list[str] = []
    second = asyncio.create_task(_collect(job, late))  # a second tab, or the page reopened
    await _settle()
    assert "".join(late) == "Once upon "  # the snapshot: what is there so far
    work.step()
    await _settle()
    work.step()
    updates = await asyncio.wait_for(second, 5)
    await asyncio.wait_for(first, 5)
    assert "".join(early) == "".join(late) == "Once upon a time."
    assert updates[0] == ("turn", "") and updates[-1] == ("done", "")
    assert job.status == "done" and jobs.running(1) is None and jobs.get(1) is job


def test_text_appended_between_two_reads_arrives_as_one_update() -> None:
    asyncio.run(_text_appended_between_two_reads_arrives_as_one_update())


async def _text_appended_between_two_reads_arrives_as_one_update() -> None:
    jobs = ChatJobs()
    job = jobs.start(ChatJob(1), Pace([]))
    job.appended("content", "a")
    job.appended("content", "b")
    job.appended("reasoning", "r")
    job.appended("content", "c")
    updates: list[Update] = []
    follower = follow(job)
    updates.append(await anext(follower))  # the snapshot is taken at the log's end
    job.appended("content", "d")
    job.appended("content", "e")
    job.appended("reasoning", "f")
    updates += [await anext(follower), await anext(follower)]
    assert updates == [("turn", ""), ("content", "de"), ("reasoning", "f")]
    job.reshaped()
    job.appended("content", "g")
    assert await anext(follower) == ("turn", "")  # a new shape: one new snapshot, text included
    await follower.aclose()


def test_one_turn_at_a_time_and_stop_ends_it_as_stopped() -> None:
    asyncio.run(_one_turn_at_a_time_and_stop_ends_it_as_stopped())


async def _one_turn_at_a_time_and_stop_ends_it_as_stopped() -> None:
    jobs, work = ChatJobs(), Pace(["a", "b", "c"])
    job = jobs.start(ChatJob(7), work)
    with pytest.raises(JobRunning):
        jobs.start(ChatJob(7), work)
    work.step()
    await _settle()
    job.stop.set()
    work.step()
    assert await job.ended_within(5)
    assert job.status == "stopped" and [t for k, t in job.log if k == "content"] == ["a"]
    assert jobs.start(ChatJob(7), Pace([])) is not job  # a new turn may start once it ended


def test_a_failing_turn_is_reported_not_raised() -> None:
    asyncio.run(_a_failing_turn_is_reported_not_raised())


async def _a_failing_turn_is_reported_not_raised() -> None:
    async def broken(job: ChatJob) -> None:
        raise RuntimeError("the pool is gone")

    job = ChatJobs().start(ChatJob(3), broken)
    assert await job.ended_within(5)
    assert job.status == "failed" and job.error == "Generation failed: RuntimeError: the pool is gone"


def test_shutdown_interrupts_running_turns_and_followers_see_the_end() -> None:
    asyncio.run(_shutdown_interrupts_running_turns_and_followers_see_the_end())


async def _shutdown_interrupts_running_turns_and_followers_see_the_end() -> None:
    jobs = ChatJobs()
    job = jobs.start(ChatJob(2), Pace(["never"]))
    shown: list[str] = []
    follower = asyncio.create_task(_collect(job, shown))
    await _settle()
    await jobs.shutdown()
    assert job.status == "interrupted"
    assert (await asyncio.wait_for(follower, 5))[-1] == ("done", "")
