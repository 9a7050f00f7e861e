"""The Responses API's shapes, rendered from the pipeline's events: the semantic event stream
(`response.created` ... `response.completed`, each with the next `sequence_number`) and the
response object.

One renderer serves both: a non-streamed response is the stream's final object with the events
dropped, so the two can never disagree. Output items come in the order the model wrote them:
`reasoning` (its text as the summary), `message` (one `output_text` part), `function_call`s.
"""

from __future__ import annotations

import copy
import time
import uuid
from collections.abc import AsyncIterable, AsyncIterator
from typing import Any

from mlx_server.services.pipeline.events import (
    Finish,
    GenerationEvent,
    Notice,
    ReasoningDelta,
    TextDelta,
    ToolCallDone,
    ToolCallStarted,
    Usage,
)

Payload = dict[str, Any]


def new_item_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:24]}"


def usage(figures: Usage | None, reasoning_tokens: int) -> Payload:
    prompt = figures.prompt_tokens if figures else 0
    completion = figures.completion_tokens if figures else 0
    return {
        "input_tokens": prompt,
        "input_tokens_details": {"cached_tokens": figures.cached_prompt_tokens if figures else 0},
        "output_tokens": completion,
        "output_tokens_details": {"reasoning_tokens": reasoning_tokens},
        "total_tokens": prompt + completion,
    }


class ResponseBuilder:
    """Builds one response from the pipeline's events and says, per event, what to stream.

    `base` holds the request's echo (model, instructions, tools, text, ...); the builder adds the
    id, times, status, output and usage."""

    def __init__(self, base: Payload) -> None:
        self.id = new_item_id("resp")
        self.created_at = int(time.time())
        self.base = base
        self.sequence = 0
        self.output: list[Payload] = []
        self.open: Payload | None = None  # the item receiving deltas
        self.held_space = ""  # whitespace before any message text: a message only once there is text
        self.call_items: dict[int, int] = {}  # tool call index -> output index
        self.reasoning_pieces = 0
        self.notices: list[str] = []
        self.finish: Finish | None = None
        self.figures: Usage | None = None

    # --- The response object ---

    def snapshot(self, status: str) -> Payload:
        incomplete = status == "incomplete"
        body: Payload = {
            "id": self.id,
            "object": "response",
            "created_at": self.created_at,
            "status": status,
            "completed_at": int(time.time()) if status == "completed" else None,
            "error": None,
            "incomplete_details": {"reason": "max_output_tokens"} if incomplete else None,
            **self.base,
            "output": copy.deepcopy(self.output) if status != "in_progress" else [],
            "usage": usage(self.figures, self.reasoning_pieces) if status != "in_progress" else None,
        }
        if self.notices:
            body["warnings"] = list(self.notices)  # not OpenAI's; SDKs ignore it, logs show it
        return body

    @property
    def status(self) -> str:
        return "incomplete" if self.finish is not None and self.finish.reason == "length" else "completed"

    # --- Events ---

    def _event(self, kind: str, **fields: Any) -> Payload:
        event = {"type": f"response.{kind}", "sequence_number": self.sequence, **fields}
        self.sequence += 1
        return event

    def start(self) -> list[Payload]:
        return [
            self._event("created", response=self.snapshot("in_progress")),
            self._event("in_progress", response=self.snapshot("in_progress")),
        ]

    def add(self, event: GenerationEvent) -> list[Payload]:
        match event:
            case TextDelta(text=text) if text:
                return self._text(text)
            case ReasoningDelta(text=text) if text:
                self.reasoning_pieces += 1
                return self._reasoning(text)
            case ToolCallStarted(index=index, id=call_id, name=name):
                item = {"id": new_item_id("fc"), "type": "function_call", "status": "in_progress"}
                events = self._open({**item, "call_id": call_id, "name": name, "arguments": ""})
                self.call_items[index] = len(self.output) - 1
                return events
            case ToolCallDone(index=index, call=call):
                return self._call_done(self.call_items[index], call.function.arguments)
            case Notice(message=message):
                self.notices.append(message)
            case Finish():
                self.finish = event
            case Usage():
                self.figures = event
        return []

    def end(self) -> list[Payload]:
        """Close what is open and send the final response (`response.completed`, or
        `response.incomplete` when max_output_tokens ran out)."""
        events = self._close()
        if not self.output:  # an empty reply is still a message, as OpenAI answers it
            events += self._open_message("") + self._close()
        status = self.status
        return [*events, self._event(status, response=self.snapshot(status))]

    def _open(self, item: Payload, **announced: Any) -> list[Payload]:
        """Close the open item and open `item`; `announced` overrides what the added event shows
        of it (a message's parts and a reasoning's summary arrive as their own events)."""
        events = self._close()
        self.output.append(item)
        self.open = item
        shown = copy.deepcopy({**item, **announced})
        return [*events, self._event("output_item.added", output_index=len(self.output) - 1, item=shown)]

    def _close(self) -> list[Payload]:
        item, self.open = self.open, None
        if item is None:
            return []
        index = self.output.index(item)
        if item["type"] == "message":
            events = self._message_done(item, index)
        elif item["type"] == "reasoning":
            events = self._reasoning_done(item, index)
        else:
            events = []
        item["status"] = "incomplete" if self.status == "incomplete" else "completed"
        return [*events, self._event("output_item.done", output_index=index, item=copy.deepcopy(item))]

    def _text(self, text: str) -> list[Payload]:
        if self.open is not None and self.open["type"] == "message":
            return [self._text_delta(text)]
        if not text.strip():
            self.held_space += text
            return []
        # Whitespace between thinking or a call and the answer is layout, not part of it.
        lead, self.held_space = ("" if self.output else self.held_space), ""
        return self._open_message(lead + text)

    def _open_message(self, text: str) -> list[Payload]:
        part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
        item_id = new_item_id("msg")
        item = {"id": item_id, "type": "message", "status": "in_progress", "role": "assistant"}
        events = self._open({**item, "content": [part]}, content=[])
        where = {"item_id": item_id, "output_index": len(self.output) - 1, "content_index": 0}
        events.append(self._event("content_part.added", **where, part=dict(part)))
        return events + ([self._text_delta(text)] if text else [])

    def _text_delta(self, text: str) -> Payload:
        assert self.open is not None
        part = self.open["content"][0]
        part["text"] += text
        return self._event("output_text.delta", **self._place(), content_index=0, delta=text, logprobs=[])

    def _message_done(self, item: Payload, index: int) -> list[Payload]:
        part = item["content"][0]
        where = {"item_id": item["id"], "output_index": index, "content_index": 0}
        return [
            self._event("output_text.done", **where, text=part["text"], logprobs=[]),
            self._event("content_part.done", **where, part=dict(part)),
        ]

    def _reasoning(self, text: str) -> list[Payload]:
        events: list[Payload] = []
        if self.open is None or self.open["type"] != "reasoning":
            part = {"type": "summary_text", "text": ""}
            item = {"id": new_item_id("rs"), "type": "reasoning", "summary": [part]}
            events += self._open(item, summary=[])
            added = self._event(
                "reasoning_summary_part.added", **self._place(), summary_index=0, part=dict(part)
            )
            events.append(added)
        assert self.open is not None
        self.open["summary"][0]["text"] += text
        delta = self._event("reasoning_summary_text.delta", **self._place(), summary_index=0, delta=text)
        return [*events, delta]

    def _reasoning_done(self, item: Payload, index: int) -> list[Payload]:
        part = item["summary"][0]
        where = {"item_id": item["id"], "output_index": index, "summary_index": 0}
        return [
            self._event("reasoning_summary_text.done", **where, text=part["text"]),
            self._event("reasoning_summary_part.done", **where, part=dict(part)),
        ]

    def _call_done(self, index: int, arguments: str) -> list[Payload]:
        item = self.output[index]
        where = {"item_id": item["id"], "output_index": index}
        events = [self._event("function_call_arguments.delta", **where, delta=arguments)]
        item["arguments"] = arguments
        done = self._event("function_call_arguments.done", **where, name=item["name"], arguments=arguments)
        return [*events, done, *self._close()]

    def _place(self) -> Payload:
        assert self.open is not None
        return {"item_id": self.open["id"], "output_index": len(self.output) - 1}


async def response_events(
    events: AsyncIterable[GenerationEvent], builder: ResponseBuilder
) -> AsyncIterator[Payload]:
    """The streamed events of one response; `builder` holds the final object afterwards."""
    for payload in builder.start():
        yield payload
    async for event in events:
        for payload in builder.add(event):
            yield payload
    for payload in builder.end():
        yield payload


async def response_object(events: AsyncIterable[GenerationEvent], builder: ResponseBuilder) -> Payload:
    """The non-streamed response: the stream's final object."""
    async for _ in response_events(events, builder):
        pass
    return builder.snapshot(builder.status)
