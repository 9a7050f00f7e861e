"""Chat turns as jobs the app owns, like probes and downloads: a POST starts one and returns,
any number of pages follow it, closing a page does not stop it.

A job (services/jobs.py) runs in an asyncio task of the app, not of a request. It keeps the
rows it added to the conversation (the reply being generated among them) and a log of what
changed: text appended to the reply or its reasoning, or a change of shape (a reply began or
ended, a tool card, a result, a notice). A follower starts from a snapshot and then reads the
log from there, so a page opened mid-reply shows what is there so far and then the rest live.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncGenerator, AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from itertools import groupby
from operator import itemgetter
from typing import Any, Literal

from mlx_manager.records import ConversationMessage
from mlx_manager.services.conversations import mark_interrupted
from mlx_manager.services.jobs import Job, JobRegistry
from mlx_server.facade import Reply as FoldedReply
from mlx_server.facade import background_session

logger = logging.getLogger("mlx_manager.chat")

# What a follower is told: the turn's new shape, text to append, or the end of the turn.
Update = tuple[Literal["turn", "content", "reasoning", "done"], str]


@dataclass(eq=False)
class Reply:
    """The assistant reply being generated: its stored row, the pipeline's fold of the events so
    far (`folded`: text, reasoning, ToolCall objects, rejected calls, finish), and when its
    reasoning began and ended (the page shows how long the model thought)."""

    message: ConversationMessage
    folded: FoldedReply = field(default_factory=FoldedReply)
    reasoning_started: float | None = None
    reasoning_ended: float | None = None
    saved_at: float = 0.0

    @property
    def text(self) -> str:
        return self.folded.text

    @property
    def reasoning_text(self) -> str:
        return self.folded.reasoning or ""

    def stored_calls(self) -> list[dict[str, Any]]:
        """The calls as the message row keeps them (JSON); a rejected one keeps its reason on the
        card ("rejected": not sent back to the model, whose history gets the reason as the
        call's result instead)."""
        calls = [call.model_dump() for call in self.folded.tool_calls]
        return calls + [{**r.call.model_dump(), "rejected": r.reason} for r in self.folded.rejected_calls]


@dataclass(eq=False)
class ChatJob(Job[int]):
    """The turn of one conversation (`key`: its id); `stop` asks it to end after the current
    token, kept and marked stopped."""

    status: Literal["running", "done", "stopped", "failed", "interrupted"] = "running"
    messages: list[ConversationMessage] = field(default_factory=list)
    reply: Reply | None = None
    notice: str = ""
    error: str | None = None
    log: list[Update] = field(default_factory=list)

    @property
    def conversation_id(self) -> int:
        return self.key

    def reshaped(self) -> None:
        """Something other than appended text changed: followers take a new snapshot."""
        self._append("turn", "")

    def appended(self, kind: Literal["content", "reasoning"], text: str) -> None:
        self._append(kind, text)

    def add(self, message: ConversationMessage) -> None:
        self.messages.append(message)
        self.reshaped()

    def drop_from(self, position: int) -> None:
        self.messages = [m for m in self.messages if m.position < position]
        self.reshaped()

    def say(self, notice: str) -> None:
        self.notice = notice
        self.reshaped()

    def settle(self, error: BaseException | None) -> None:
        self.reply = None
        if isinstance(error, asyncio.CancelledError):
            self.status = "interrupted"  # the app is shutting down; the reply was saved as interrupted
        elif error is not None:
            self.error = f"Generation failed: {type(error).__name__}: {error}"
            self.status = "failed"
        else:
            self.status = "stopped" if self.stop.is_set() else "failed" if self.error else "done"

    def _append(self, kind: Literal["turn", "content", "reasoning"], text: str) -> None:
        self.log.append((kind, text))
        self.notify()

    async def wait_beyond(self, seen: int) -> None:
        # Each follower checks the log before it waits, and nothing runs between that check and
        # the wait.
        if len(self.log) == seen and not self.finished:
            await self.changed()


async def follow(job: ChatJob) -> AsyncGenerator[Update, None]:
    """The turn as a follower sees it: a snapshot ("turn"), then appended text, a new snapshot
    whenever the shape changed, and "done". Render each "turn" before awaiting anything: the
    log position it stands for is the one at the moment it is yielded."""
    seen = len(job.log)
    yield "turn", ""
    while True:
        if seen == len(job.log):
            if job.finished:
                yield "done", ""
                return
            await job.wait_beyond(seen)
            continue
        entries, seen = job.log[seen:], len(job.log)
        if any(kind == "turn" for kind, _ in entries):
            yield "turn", ""
            continue
        for kind, text in _joined(entries):
            yield kind, text


def _joined(entries: list[Update]) -> Iterator[Update]:
    """Runs of appended text of one kind as one update (fewer, larger events for a slow page)."""
    for kind, run in groupby(entries, key=itemgetter(0)):
        yield kind, "".join(text for _, text in run)


ChatJobs = JobRegistry[int, ChatJob]

_jobs = ChatJobs()


def get_chat_jobs() -> ChatJobs:
    return _jobs


@asynccontextmanager
async def chat_services() -> AsyncIterator[None]:
    """The app's chat turns, fresh for each run of the app: a reply left running by a previous
    run is marked interrupted at start; turns still running at shutdown are cancelled (and
    saved as interrupted)."""
    global _jobs
    with background_session() as session:
        if count := mark_interrupted(session):
            logger.info("%d chat replies cut by a restart are marked interrupted", count)
    _jobs = ChatJobs()
    try:
        yield
    finally:
        await _jobs.shutdown()
