"""Anthropic's shapes, rendered from the pipeline's events: the Messages event stream
(message_start, content blocks, message_delta, message_stop) and the message object."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterable, AsyncIterator

from mlx_server.schemas.openai import ToolCall
from mlx_server.services.pipeline.events import (
    Finish,
    GenerationEvent,
    Notice,
    ReasoningDelta,
    Reply,
    TextDelta,
    ToolCallDelta,
    ToolCallStarted,
    Usage,
)

Event = tuple[str, dict[str, object]]


def new_message_id() -> str:
    return f"msg_{uuid.uuid4().hex[:24]}"


def stop_reason_of(finish: Finish | None) -> tuple[str | None, str | None]:
    """Anthropic's stop_reason and stop_sequence for the pipeline's finish."""
    if finish is None:
        return None, None
    if finish.reason == "tool_calls":
        return "tool_use", None
    if finish.reason == "length":
        return "max_tokens", None
    if finish.stop_sequence is not None:
        return "stop_sequence", finish.stop_sequence
    return "end_turn", None


def usage(figures: Usage | None) -> dict[str, int]:
    return {
        "input_tokens": figures.prompt_tokens if figures else 0,
        "output_tokens": figures.completion_tokens if figures else 0,
        "cache_read_input_tokens": figures.cached_prompt_tokens if figures else 0,
        "cache_creation_input_tokens": 0,
    }


def _tool_input(call: ToolCall) -> dict[str, object]:
    value = json.loads(call.function.arguments or "{}")
    return value if isinstance(value, dict) else {"value": value}


def message(model: str, reply: Reply) -> dict[str, object]:
    """The non-streamed Messages response."""
    content: list[dict[str, object]] = []
    if reply.reasoning_content:
        content.append({"type": "thinking", "thinking": reply.reasoning_content, "signature": ""})
    if reply.content:
        content.append({"type": "text", "text": reply.content})
    for call in reply.tool_calls:
        content.append(
            {"type": "tool_use", "id": call.id, "name": call.function.name, "input": _tool_input(call)}
        )
    stop_reason, stop_sequence = stop_reason_of(reply.finish)
    body: dict[str, object] = {
        "id": new_message_id(),
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": stop_reason,
        "stop_sequence": stop_sequence,
        "usage": usage(reply.usage),
    }
    if reply.notices:
        body["warnings"] = reply.notices  # not Anthropic's; SDKs ignore it, logs show it
    return body


async def events(
    stream: AsyncIterable[GenerationEvent], model: str, prompt_tokens: int
) -> AsyncIterator[Event]:
    """The Messages event stream; `prompt_tokens` is known before the first event."""
    start: dict[str, object] = {
        "id": new_message_id(),
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {"input_tokens": prompt_tokens, "output_tokens": 0},
    }
    yield "message_start", {"type": "message_start", "message": start}
    yield "ping", {"type": "ping"}
    blocks = _Blocks()
    finish: Finish | None = None
    figures: Usage | None = None
    notices: list[str] = []
    async for event in stream:
        if isinstance(event, Finish):
            finish = event
        elif isinstance(event, Usage):
            figures = event
        elif isinstance(event, Notice):
            notices.append(event.message)
        else:
            for block_event in blocks.render(event):
                yield block_event
    for block_event in blocks.close():
        yield block_event
    stop_reason, stop_sequence = stop_reason_of(finish)
    delta = {"stop_reason": stop_reason, "stop_sequence": stop_sequence}
    message_delta: dict[str, object] = {"type": "message_delta", "delta": delta, "usage": usage(figures)}
    if notices:  # as the whole message's `warnings` (not Anthropic's; SDKs ignore it)
        message_delta["warnings"] = notices
    yield "message_delta", message_delta
    yield "message_stop", {"type": "message_stop"}


class _Blocks:
    """Opens, fills and closes content blocks as the events change kind."""

    def __init__(self) -> None:
        self.index = -1
        self.open: str | None = None  # "thinking" | "text" | "tool_use"
        self.held_space = ""  # whitespace before any text: a block only once there is text

    def render(self, event: GenerationEvent) -> list[Event]:
        match event:
            case TextDelta(text=text) if text:
                return self._text("text", text)
            case ReasoningDelta(text=text) if text:
                return self._text("thinking", text)
            case ToolCallStarted(id=call_id, name=name):
                return self._start("tool_use", {"type": "tool_use", "id": call_id, "name": name, "input": {}})
            case ToolCallDelta(arguments=arguments) if arguments:
                return [self._delta({"type": "input_json_delta", "partial_json": arguments})]
        return []

    def _text(self, kind: str, text: str) -> list[Event]:
        events: list[Event] = []
        if self.open != kind:
            if kind == "text" and not text.strip():
                self.held_space += text
                return []
            block: dict[str, object] = (
                {"type": "thinking", "thinking": "", "signature": ""}
                if kind == "thinking"
                else {"type": "text", "text": ""}
            )
            events += self._start(kind, block)
            text, self.held_space = (self.held_space + text if kind == "text" else text), ""
        key = "thinking_delta" if kind == "thinking" else "text_delta"
        events.append(self._delta({"type": key, key.removesuffix("_delta"): text}))
        return events

    def _start(self, kind: str, block: dict[str, object]) -> list[Event]:
        events = self.close()
        self.index += 1
        self.open = kind
        start = {"type": "content_block_start", "index": self.index, "content_block": block}
        events.append(("content_block_start", start))
        return events

    def _delta(self, delta: dict[str, object]) -> Event:
        return "content_block_delta", {"type": "content_block_delta", "index": self.index, "delta": delta}

    def close(self) -> list[Event]:
        if self.open is None:
            return []
        self.open = None
        return [("content_block_stop", {"type": "content_block_stop", "index": self.index})]
