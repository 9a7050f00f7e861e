"""A `GenerationRequest` sent to an Anthropic-compatible upstream (POST {base_url}/v1/messages,
streamed), its events turned into the pipeline's typed events as they arrive.

The pipeline's messages become Messages-API turns here: system
text joins `system`, assistant `tool_calls` become `tool_use` blocks, `role: tool` messages
become `tool_result` blocks of a user turn, data: URL images become base64 image blocks.
"""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator
from typing import Any, cast

import httpx

from mlx_server.errors import APIError
from mlx_server.schemas.openai import FunctionCall, ToolCall
from mlx_server.services.operations.generation_defaults import default_max_tokens
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
from mlx_server.services.pipeline.request import ContentPart, GenerationRequest, Message, TextPart
from mlx_server.services.remote.openai_upstream import sampling_fields, sse_data
from mlx_server.services.remote.progress import UpstreamProgress

STOP_REASONS: dict[str, FinishReason] = {"max_tokens": "length", "tool_use": "tool_calls"}


def _content_blocks(content: str | tuple[ContentPart, ...] | None) -> list[dict[str, Any]]:
    if not isinstance(content, tuple):
        return [{"type": "text", "text": content}] if content else []
    return [
        {"type": "text", "text": part.text} if isinstance(part, TextPart) else _image_block(part.url)
        for part in content
    ]


def _image_block(url: str) -> dict[str, Any]:
    if not url.startswith("data:"):
        return {"type": "image", "source": {"type": "url", "url": url}}
    media_type, _, data = url[5:].partition(";base64,")
    return {"type": "image", "source": {"type": "base64", "media_type": media_type, "data": data}}


def _tool_use(call: ToolCall) -> dict[str, Any]:
    try:
        arguments = json.loads(call.function.arguments or "{}")
    except ValueError:
        raise APIError(400, "A tool call's arguments are not JSON.", param="messages") from None
    return {"type": "tool_use", "id": call.id, "name": call.function.name, "input": arguments}


def _turns(messages: tuple[Message, ...]) -> tuple[str, list[dict[str, Any]]]:
    """The system text and the alternating turns of the pipeline's `messages`."""
    system: list[str] = []
    turns: list[dict[str, Any]] = []
    for message in messages:
        role: str = message.role
        if role in ("system", "developer"):
            system.extend(b["text"] for b in _content_blocks(message.content) if b["type"] == "text")
            continue
        if role == "tool":
            content = (
                message.content if isinstance(message.content, str) else _content_blocks(message.content)
            )
            result = {"type": "tool_result", "tool_use_id": message.tool_call_id, "content": content or ""}
            role, blocks = "user", [result]
        else:
            blocks = _content_blocks(message.content) + [_tool_use(call) for call in message.tool_calls]
        if turns and turns[-1]["role"] == role:
            turns[-1]["content"].extend(blocks)
        else:
            turns.append({"role": role, "content": blocks})
    return "\n\n".join(system), turns


def messages_body(request: GenerationRequest, model: str) -> dict[str, Any]:
    params = request.params
    system, turns = _turns(request.messages or ())
    body: dict[str, Any] = {
        "model": model,
        "messages": turns,
        "max_tokens": params.max_tokens or default_max_tokens(),
        "stream": True,
        **{
            k: v
            for k, v in sampling_fields(params.sampling).items()
            if k in ("temperature", "top_p", "top_k")
        },
    }
    if system:
        body["system"] = system
    if params.stop:
        body["stop_sequences"] = params.stop
    if request.tools:
        body["tools"] = [
            {
                "name": tool.name,
                "description": tool.description or "",
                "input_schema": dict(tool.parameters or {"type": "object"}),
            }
            for tool in request.tools
        ]
        body["tool_choice"] = request.tool_choice.as_anthropic()
    return body


class _Blocks:
    """Content blocks by index: tool_use blocks become calls numbered in order."""

    def __init__(self) -> None:
        self.tools: dict[int, tuple[int, str, str, list[str]]] = {}

    def start(self, index: int, block: dict[str, Any]) -> list[GenerationEvent]:
        if block.get("type") != "tool_use":
            text = block.get("text") or block.get("thinking")
            return [TextDelta(text) if block.get("type") == "text" else ReasoningDelta(text)] if text else []
        call = len(self.tools)
        self.tools[index] = (call, str(block.get("id")), str(block.get("name")), [])
        return [ToolCallStarted(call, str(block.get("id")), str(block.get("name")))]

    def delta(self, index: int, delta: dict[str, Any]) -> list[GenerationEvent]:
        kind = delta.get("type")
        if kind == "text_delta":
            return [TextDelta(str(delta.get("text", "")))]
        if kind == "thinking_delta":
            return [ReasoningDelta(str(delta.get("thinking", "")))]
        if kind == "input_json_delta" and index in self.tools and delta.get("partial_json"):
            self.tools[index][3].append(str(delta["partial_json"]))
            return [ToolCallDelta(self.tools[index][0], str(delta["partial_json"]))]
        return []

    def stop(self, index: int) -> list[GenerationEvent]:
        if index not in self.tools:
            return []
        call, call_id, name, parts = self.tools[index]
        arguments = "".join(parts) or "{}"
        return [
            ToolCallDone(call, ToolCall(id=call_id, function=FunctionCall(name=name, arguments=arguments)))
        ]


def _events_of(
    name: str, event: dict[str, Any], blocks: _Blocks, progress: UpstreamProgress
) -> list[GenerationEvent]:
    index = int(event.get("index", 0))
    if name == "message_start":
        usage = (event.get("message") or {}).get("usage") or {}
        progress.usage(usage.get("input_tokens"), None)
    elif name == "content_block_start":
        return blocks.start(index, event.get("content_block") or {})
    elif name == "content_block_delta":
        return blocks.delta(index, event.get("delta") or {})
    elif name == "content_block_stop":
        return blocks.stop(index)
    elif name == "message_delta":
        usage = event.get("usage") or {}
        progress.usage(usage.get("input_tokens"), usage.get("output_tokens"))
    elif name == "error":
        raise progress.upstream_error(str((event.get("error") or {}).get("message", event)))
    return []


async def anthropic_events(
    response: httpx.Response, progress: UpstreamProgress
) -> AsyncGenerator[GenerationEvent, None]:
    """The events of a streamed Messages reply; Finish and Usage once message_stop arrived."""
    blocks, finish, stopped = _Blocks(), None, False
    async for name, data in sse_data(response):
        event = cast(dict[str, Any], json.loads(data))
        name = name or str(event.get("type"))
        if name == "message_delta":
            reason = (event.get("delta") or {}).get("stop_reason")
            finish = STOP_REASONS.get(reason, "stop") if reason else finish
        if name == "message_stop":
            stopped = True
            break
        for generated in _events_of(name, event, blocks, progress):
            if not isinstance(generated, ToolCallDone):
                progress.token()
            yield generated
    if not stopped:
        raise progress.upstream_error("the stream ended before the reply was complete")
    yield Finish(finish or "stop")
    yield progress.final_usage()
