"""A `GenerationRequest` sent to an OpenAI-compatible upstream (POST {base_url}/chat/completions,
streamed), its chunks turned into the pipeline's typed events as they arrive."""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any, cast

import httpx

from mlx_server.schemas.openai import FunctionCall, ToolCall
from mlx_server.services.pipeline.engine.params import SamplingParams
from mlx_server.services.pipeline.events import (
    Finish,
    FinishReason,
    GenerationEvent,
    ReasoningDelta,
    TextDelta,
    ToolCallDelta,
    ToolCallDone,
    ToolCallStarted,
)
from mlx_server.services.pipeline.request import GenerationRequest
from mlx_server.services.remote.progress import UpstreamProgress

FINISH_REASONS: dict[str, FinishReason] = {"stop": "stop", "length": "length", "tool_calls": "tool_calls"}


def sampling_fields(sampling: SamplingParams) -> dict[str, Any]:
    """The sampling values a request set away from their defaults (upstreams have their own)."""
    defaults = SamplingParams()
    names = ("temperature", "top_p", "top_k", "seed", "presence_penalty", "frequency_penalty")
    return {n: getattr(sampling, n) for n in names if getattr(sampling, n) != getattr(defaults, n)}


def chat_body(request: GenerationRequest, model: str) -> dict[str, Any]:
    params = request.params
    body: dict[str, Any] = {
        "model": model,
        "messages": [message.as_openai() for message in request.messages or ()],
        "stream": True,
        "stream_options": {"include_usage": True},
        **sampling_fields(params.sampling),
    }
    if params.max_tokens is not None:
        body["max_tokens"] = params.max_tokens
    if params.stop:
        body["stop"] = params.stop
    if request.tools:
        body["tools"] = [tool.as_openai() for tool in request.tools]
        body["parallel_tool_calls"] = request.parallel_tool_calls
        body["tool_choice"] = request.tool_choice.as_openai()
    if request.output_format is not None:
        schema = {"name": "output", "schema": request.output_format.schema}
        body["response_format"] = (
            {"type": "json_object"}
            if request.output_format.kind == "json_object"
            else {"type": "json_schema", "json_schema": schema}
        )
    return body


async def sse_data(response: httpx.Response) -> AsyncIterator[tuple[str | None, str]]:
    """The (event name, data) of each server-sent event of `response`."""
    name: str | None = None
    data: list[str] = []
    async for line in response.aiter_lines():
        if line.startswith("event:"):
            name = line[6:].strip()
        elif line.startswith("data:"):
            data.append(line[5:].removeprefix(" "))
        elif not line and data:
            yield name, "\n".join(data)
            name, data = None, []
    if data:
        yield name, "\n".join(data)


class _Calls:
    """Streamed tool-call fragments, by index, until the reply ends."""

    def __init__(self) -> None:
        self.calls: dict[int, tuple[str, str, list[str]]] = {}

    def feed(self, fragment: dict[str, Any]) -> list[GenerationEvent]:
        index = int(fragment.get("index", len(self.calls)))
        function = fragment.get("function") or {}
        events: list[GenerationEvent] = []
        if index not in self.calls:
            call_id = str(fragment.get("id") or f"call_{index}")
            self.calls[index] = (call_id, str(function.get("name") or ""), [])
            events.append(ToolCallStarted(index, call_id, self.calls[index][1]))
        arguments = function.get("arguments")
        if arguments:
            self.calls[index][2].append(arguments)
            events.append(ToolCallDelta(index, arguments))
        return events

    def done(self) -> list[GenerationEvent]:
        return [
            ToolCallDone(i, ToolCall(id=cid, function=FunctionCall(name=name, arguments="".join(parts))))
            for i, (cid, name, parts) in sorted(self.calls.items())
        ]


def _delta_events(choice: dict[str, Any], calls: _Calls) -> list[GenerationEvent]:
    delta = choice.get("delta") or {}
    events: list[GenerationEvent] = []
    reasoning = delta.get("reasoning_content") or delta.get("reasoning")
    if reasoning:
        events.append(ReasoningDelta(str(reasoning)))
    if delta.get("content"):
        events.append(TextDelta(str(delta["content"])))
    for fragment in delta.get("tool_calls") or []:
        events.extend(calls.feed(fragment))
    return events


async def openai_events(
    response: httpx.Response, progress: UpstreamProgress
) -> AsyncGenerator[GenerationEvent, None]:
    """The events of a streamed chat completion; Finish and Usage come last, once the stream
    has ended properly (a stream cut short raises instead)."""
    calls, finish = _Calls(), None
    async for _, data in sse_data(response):
        if data == "[DONE]":
            break
        chunk = cast(dict[str, Any], json.loads(data))
        if "error" in chunk:
            raise progress.upstream_error(str((chunk["error"] or {}).get("message", chunk["error"])))
        if chunk.get("usage"):
            progress.usage(
                int(chunk["usage"].get("prompt_tokens", 0)), chunk["usage"].get("completion_tokens")
            )
        for choice in chunk.get("choices") or []:
            for event in _delta_events(choice, calls):
                progress.token()
                yield event
            if choice.get("finish_reason"):
                finish = FINISH_REASONS.get(choice["finish_reason"], "stop")
    if finish is None:
        raise progress.upstream_error("the stream ended before the reply was complete")
    for event in calls.done():
        yield event
    yield Finish(finish)
    yield progress.final_usage()
