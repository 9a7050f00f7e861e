"""Ollama's shapes, rendered from the pipeline's events: /api/chat and /api/generate replies,
whole or as NDJSON chunks, and /api/embed results.

A streamed reply is one object per piece of text (`message.content` for chat, `response` for
generate; `thinking` beside it for reasoning), one per finished tool call (`message.tool_calls`,
arguments as an object), then a last object with `done: true`, `done_reason` and the figures.
Durations are nanoseconds, as Ollama reports them: `load_duration` is the time from the
request's arrival until generation could start (model lease, prompt and grammar),
`prompt_eval_duration` the prefill (to the first token), `eval_duration` the decode after it.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import AsyncIterable, AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

from mlx_server.schemas.openai import ToolCall
from mlx_server.services.operations.model_pulls import PullProgress
from mlx_server.services.pipeline.engine.params import CompletionStats
from mlx_server.services.pipeline.events import (
    Finish,
    GenerationEvent,
    Notice,
    ReasoningDelta,
    Reply,
    TextDelta,
    ToolCallDone,
)

Kind = Literal["chat", "generate"]
NS_PER_S = 1_000_000_000


def created_at() -> str:
    return datetime.now(UTC).isoformat().replace("+00:00", "Z")


def nanoseconds(seconds: float) -> int:
    return int(seconds * NS_PER_S)


@dataclass
class RequestClock:
    """When the request arrived and when its generation was ready to start (perf_counter)."""

    started: float = field(default_factory=time.perf_counter)
    ready: float | None = None

    def mark_ready(self) -> None:
        self.ready = time.perf_counter()

    def figures(self, stats: CompletionStats) -> dict[str, int]:
        now = time.perf_counter()
        return {
            "total_duration": nanoseconds(now - self.started),
            "load_duration": nanoseconds((self.ready or now) - self.started),
            "prompt_eval_count": stats.prompt_tokens,
            "prompt_eval_duration": nanoseconds(stats.ttft_s or 0.0),
            "eval_count": stats.completion_tokens,
            "eval_duration": nanoseconds(stats.decode_s),
        }


def done_reason(finish: Finish | None) -> str:
    """Ollama says "stop" also when the reply is a tool call."""
    return "length" if finish is not None and finish.reason == "length" else "stop"


def tool_call(call: ToolCall) -> dict[str, object]:
    arguments = json.loads(call.function.arguments or "{}")
    return {"function": {"name": call.function.name, "arguments": arguments}}


def _piece(kind: Kind, model: str, text: str = "", **extra: Any) -> dict[str, object]:
    """One object of a reply: the text under the kind's key, `thinking` or calls beside it."""
    if kind == "chat":
        return {
            "model": model,
            "created_at": created_at(),
            "message": {"role": "assistant", "content": text, **extra},
        }
    return {"model": model, "created_at": created_at(), "response": text, **extra}


def reply(
    kind: Kind, model: str, whole: Reply, clock: RequestClock, stats: CompletionStats
) -> dict[str, object]:
    """The non-streamed response."""
    extra: dict[str, object] = {}
    if whole.reasoning_content:
        extra["thinking"] = whole.reasoning_content
    if whole.tool_calls and kind == "chat":
        extra["tool_calls"] = [tool_call(call) for call in whole.tool_calls]
    body = _piece(kind, model, whole.content or "", **extra)
    body.update(done=True, done_reason=done_reason(whole.finish), **clock.figures(stats))
    if whole.notices:
        body["warnings"] = whole.notices  # not Ollama's; its clients ignore it, logs show it
    return body


async def chunks(
    kind: Kind,
    events: AsyncIterable[GenerationEvent],
    model: str,
    clock: RequestClock,
    stats: CompletionStats,
) -> AsyncIterator[dict[str, object]]:
    """The NDJSON objects of a streamed reply, the figures in the last."""
    finish: Finish | None = None
    notices: list[str] = []
    async for event in events:
        match event:
            case TextDelta(text=text) if text:
                yield {**_piece(kind, model, text), "done": False}
            case ReasoningDelta(text=text) if text:
                yield {**_piece(kind, model, thinking=text), "done": False}
            case ToolCallDone(call=call) if kind == "chat":
                yield {**_piece(kind, model, tool_calls=[tool_call(call)]), "done": False}
            case Notice(message=message):
                notices.append(message)
            case Finish():
                finish = event
    last = _piece(kind, model)
    last.update(done=True, done_reason=done_reason(finish), **clock.figures(stats))
    if notices:
        last["warnings"] = notices  # as in a whole reply
    yield last


def loaded(kind: Kind, model: str, reason: Literal["load", "unload"]) -> dict[str, object]:
    """The answer to a request with nothing to generate (Ollama's way to load or unload)."""
    return {**_piece(kind, model), "done": True, "done_reason": reason}


def embeddings(
    model: str, vectors: list[list[float]], prompt_tokens: int, clock: RequestClock
) -> dict[str, object]:
    now = time.perf_counter()
    return {
        "model": model,
        "embeddings": vectors,
        "total_duration": nanoseconds(now - clock.started),
        "load_duration": nanoseconds((clock.ready or now) - clock.started),
        "prompt_eval_count": prompt_tokens,
    }


def pull_digest(repo_id: str) -> str:
    """A stable digest for a repo's one "layer" (Ollama's progress names a layer by digest)."""
    return "sha256:" + hashlib.sha256(repo_id.encode()).hexdigest()


def pull_lines(progress: PullProgress, repo_id: str) -> list[dict[str, object]]:
    """The objects one download update becomes, as Ollama's /api/pull streams them: the layer's
    bytes while it runs; digest check, manifest and success once the model is registered; an
    error object when the download failed or was cancelled."""
    if progress.error is not None or progress.status in ("failed", "cancelled"):
        return [{"error": progress.error or f"The download of {repo_id} was {progress.status}."}]
    digest = pull_digest(repo_id)
    layer: dict[str, object] = {"status": f"pulling {digest[7:19]}", "digest": digest}
    if progress.bytes_total is not None:
        layer.update(total=progress.bytes_total, completed=progress.bytes_done)
    if progress.status != "completed":
        return [layer]
    done: list[dict[str, object]] = [
        {"status": "verifying sha256 digest"},
        {"status": "writing manifest"},
        {"status": "success"},
    ]
    return [layer, *done] if progress.bytes_total else done  # the layer at 100 %, unless none ran
