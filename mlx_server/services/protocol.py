"""Anthropic Messages <-> the pipeline's OpenAI-format dicts (blueprint §9).

One inference pipeline serves both protocols: `anthropic_to_internal()` turns a Messages
request into the message dicts, tools and choices `generate_chat_completion()` takes, and the
result (a response dict, or its chunk stream) is turned back into Anthropic's shapes. Ids
survive the round trip: a `tool_use` id becomes the OpenAI call id, and a `tool_result`
becomes a `role: tool` message with that id.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterable, AsyncIterator
from dataclasses import dataclass
from typing import Any

from mlx_server.errors import APIError
from mlx_server.schemas.anthropic import (
    ImageBlock,
    Message,
    MessagesInput,
    MessagesRequest,
    RedactedThinkingBlock,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
)
from mlx_server.services.generation import CompletionStats, GenerationParams
from mlx_server.services.sampling import SamplingParams

Event = tuple[str, dict[str, Any]]


@dataclass(frozen=True)
class InternalChat:
    """A chat request as the pipeline takes it, whichever protocol it came in."""

    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None
    tool_choice: str | dict[str, Any] | None
    parallel_tool_calls: bool
    enable_thinking: bool | None


def new_message_id() -> str:
    return f"msg_{uuid.uuid4().hex[:24]}"


class ProtocolTranslator:
    """Stateless; one instance serves every request."""

    # --- Requests ---

    def anthropic_to_internal(self, request: MessagesInput) -> InternalChat:
        system = _system_text(request)
        messages: list[dict[str, Any]] = [{"role": "system", "content": system}] if system else []
        for index, message in enumerate(request.messages):
            if message.role == "user":
                messages.extend(_user_messages(message, index))
            elif message.role == "assistant":
                messages.append(_assistant_message(message, index))
        tools = [_openai_tool(t.name, t.description, t.input_schema) for t in request.tools or []] or None
        choice = request.tool_choice
        if choice is not None and choice.type in ("any", "tool") and not tools:
            raise APIError(
                400, f'tool_choice "{choice.type}" requires tools, but none were given.', param="tool_choice"
            )
        return InternalChat(
            messages=messages,
            tools=tools,
            tool_choice=_tool_choice(request),
            parallel_tool_calls=not (choice is not None and choice.disable_parallel_tool_use),
            enable_thinking=_thinking_toggle(request),
        )

    def generation_params(self, request: MessagesRequest) -> GenerationParams:
        thinking = request.thinking
        budget = thinking.budget_tokens if thinking is not None and thinking.type == "enabled" else None
        if budget is not None and budget >= request.max_tokens:
            raise APIError(
                400, "thinking.budget_tokens must be less than max_tokens.", param="thinking.budget_tokens"
            )
        return GenerationParams(
            max_tokens=request.max_tokens,
            # Clients written for Claude send 32k-64k by habit; against a smaller local context
            # that is a ceiling, not a demand to reject.
            max_tokens_is_ceiling=True,
            stop=list(request.stop_sequences or []),
            sampling=SamplingParams(
                temperature=request.temperature,
                top_p=request.top_p if request.top_p is not None else 1.0,
                top_k=request.top_k or 0,
            ),
        )

    # --- Responses ---

    def internal_to_anthropic_response(
        self, result: dict[str, Any], stats: CompletionStats
    ) -> dict[str, Any]:
        choice = result["choices"][0]
        message = choice["message"]
        content: list[dict[str, Any]] = []
        if message.get("reasoning_content"):
            content.append({"type": "thinking", "thinking": message["reasoning_content"], "signature": ""})
        if message.get("content"):
            content.append({"type": "text", "text": message["content"]})
        for call in message.get("tool_calls") or []:
            function = call["function"]
            content.append(
                {"type": "tool_use", "id": call["id"], "name": function["name"], "input": _input(function)}
            )
        stop_reason, stop_sequence = stop_reason_of(choice["finish_reason"], stats)
        body: dict[str, Any] = {
            "id": new_message_id(),
            "type": "message",
            "role": "assistant",
            "model": result["model"],
            "content": content,
            "stop_reason": stop_reason,
            "stop_sequence": stop_sequence,
            "usage": usage(stats),
        }
        if result.get("warnings"):
            body["warnings"] = result["warnings"]  # not Anthropic's; SDKs ignore it, logs show it
        return body

    def anthropic_events(
        self, chunks: AsyncIterable[dict[str, Any]], model: str, stats: CompletionStats
    ) -> AsyncIterator[Event]:
        """Anthropic's stream (message_start, content blocks, message_delta, message_stop)
        from the pipeline's OpenAI chunks."""
        return _EventWriter(model, stats).events(chunks)


def stop_reason_of(finish_reason: str | None, stats: CompletionStats) -> tuple[str | None, str | None]:
    if finish_reason == "tool_calls":
        return "tool_use", None
    if finish_reason == "length":
        return "max_tokens", None
    if stats.stop_sequence is not None:
        return "stop_sequence", stats.stop_sequence
    return ("end_turn", None) if finish_reason is not None else (None, None)


def usage(stats: CompletionStats) -> dict[str, int]:
    return {
        "input_tokens": stats.prompt_tokens,
        "output_tokens": stats.completion_tokens,
        "cache_read_input_tokens": stats.cached_prompt_tokens,
        "cache_creation_input_tokens": 0,
    }


class _EventWriter:
    """One streamed message: opens, fills and closes content blocks as the deltas change kind."""

    def __init__(self, model: str, stats: CompletionStats) -> None:
        self.model = model
        self.stats = stats
        self.index = -1
        self.open: str | None = None  # "thinking" | "text" | "tool_use"
        self.held_space = ""  # whitespace before any text: a block only once there is text

    async def events(self, chunks: AsyncIterable[dict[str, Any]]) -> AsyncIterator[Event]:
        message: dict[str, Any] = {
            "id": new_message_id(),
            "type": "message",
            "role": "assistant",
            "model": self.model,
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {"input_tokens": self.stats.prompt_tokens, "output_tokens": 0},
        }
        yield "message_start", {"type": "message_start", "message": message}
        yield "ping", {"type": "ping"}
        finish_reason: str | None = None
        async for chunk in chunks:
            for choice in chunk["choices"]:
                for event in self._delta(choice["delta"]):
                    yield event
                finish_reason = choice.get("finish_reason") or finish_reason
        for event in self._close():
            yield event
        stop_reason, stop_sequence = stop_reason_of(finish_reason, self.stats)
        yield (
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": stop_reason, "stop_sequence": stop_sequence},
                "usage": usage(self.stats),
            },
        )
        yield "message_stop", {"type": "message_stop"}

    def _delta(self, delta: dict[str, Any]) -> list[Event]:
        events: list[Event] = []
        if delta.get("reasoning_content"):
            events += self._text("thinking", delta["reasoning_content"])
        if delta.get("content"):
            events += self._text("text", delta["content"])
        for call in delta.get("tool_calls") or []:
            if call.get("id"):
                block = {"type": "tool_use", "id": call["id"], "name": call["function"]["name"], "input": {}}
                events += self._start("tool_use", block)
            arguments = (call.get("function") or {}).get("arguments")
            if arguments:
                events.append(self._block_delta({"type": "input_json_delta", "partial_json": arguments}))
        return events

    def _text(self, kind: str, text: str) -> list[Event]:
        events: list[Event] = []
        if self.open != kind:
            if kind == "text" and not text.strip():
                self.held_space += text
                return []
            block = (
                {"type": "thinking", "thinking": "", "signature": ""}
                if kind == "thinking"
                else {"type": "text", "text": ""}
            )
            events += self._start(kind, block)
            text, self.held_space = (self.held_space + text if kind == "text" else text), ""
        key = "thinking_delta" if kind == "thinking" else "text_delta"
        events.append(self._block_delta({"type": key, key.removesuffix("_delta"): text}))
        return events

    def _start(self, kind: str, block: dict[str, Any]) -> list[Event]:
        events = self._close()
        self.index += 1
        self.open = kind
        events.append(
            (
                "content_block_start",
                {"type": "content_block_start", "index": self.index, "content_block": block},
            )
        )
        return events

    def _block_delta(self, delta: dict[str, Any]) -> Event:
        return "content_block_delta", {"type": "content_block_delta", "index": self.index, "delta": delta}

    def _close(self) -> list[Event]:
        if self.open is None:
            return []
        self.open = None
        return [("content_block_stop", {"type": "content_block_stop", "index": self.index})]


# --- Request conversion helpers ---


def _system_text(request: MessagesInput) -> str:
    """The system prompt: the `system` field, then any `role: system` messages, in order."""
    parts: list[str] = []
    if isinstance(request.system, str):
        parts.append(request.system)
    elif request.system:
        parts.append("\n\n".join(block.text for block in request.system))
    for index, message in enumerate(request.messages):
        if message.role != "system":
            continue
        if isinstance(message.content, str):
            parts.append(message.content)
            continue
        for position, block in enumerate(message.content):
            if not isinstance(block, TextBlock):
                raise _bad_block(index, position, block.type, "system")
            parts.append(block.text)
    return "\n\n".join(p for p in parts if p)


def _user_messages(message: Message, index: int) -> list[dict[str, Any]]:
    """Tool results become `role: tool` messages (first, as the pipeline expects them right
    after the assistant's calls); the rest stays one user message."""
    if isinstance(message.content, str):
        return [{"role": "user", "content": message.content}]
    results: list[dict[str, Any]] = []
    parts: list[dict[str, Any]] = []
    for position, block in enumerate(message.content):
        if isinstance(block, ToolResultBlock):
            results.append(
                {"role": "tool", "tool_call_id": block.tool_use_id, "content": _result_content(block)}
            )
        elif isinstance(block, TextBlock):
            parts.append({"type": "text", "text": block.text})
        elif isinstance(block, ImageBlock):
            parts.append(_image_part(block))
        else:
            raise _bad_block(index, position, block.type, "user")
    if parts:
        only_text = all(p["type"] == "text" for p in parts)
        content: Any = "\n\n".join(p["text"] for p in parts) if only_text else parts
        results.append({"role": "user", "content": content})
    return results


def _assistant_message(message: Message, index: int) -> dict[str, Any]:
    if isinstance(message.content, str):
        return {"role": "assistant", "content": message.content}
    texts: list[str] = []
    reasoning: list[str] = []
    calls: list[dict[str, Any]] = []
    for position, block in enumerate(message.content):
        if isinstance(block, TextBlock):
            texts.append(block.text)
        elif isinstance(block, ThinkingBlock):
            reasoning.append(block.thinking)
        elif isinstance(block, RedactedThinkingBlock):
            continue  # encrypted by Anthropic: nothing a local model can read
        elif isinstance(block, ToolUseBlock):
            arguments = json.dumps(block.input, ensure_ascii=False)
            calls.append(
                {"id": block.id, "type": "function", "function": {"name": block.name, "arguments": arguments}}
            )
        else:
            raise _bad_block(index, position, block.type, "assistant")
    result: dict[str, Any] = {"role": "assistant", "content": "".join(texts) or None}
    if reasoning:
        result["reasoning_content"] = "\n\n".join(reasoning)
    if calls:
        result["tool_calls"] = calls
    return result


def _result_content(block: ToolResultBlock) -> Any:
    prefix = "Error: " if block.is_error else ""
    if isinstance(block.content, str):
        return prefix + block.content
    parts = [
        {"type": "text", "text": b.text} if isinstance(b, TextBlock) else _image_part(b)
        for b in block.content
    ]
    if all(p["type"] == "text" for p in parts):
        return prefix + "\n\n".join(p["text"] for p in parts)
    return ([{"type": "text", "text": prefix}] if prefix else []) + parts


def _image_part(block: ImageBlock) -> dict[str, Any]:
    source = block.source
    url = source.url if source.type == "url" else f"data:{source.media_type};base64,{source.data}"
    return {"type": "image_url", "image_url": {"url": url}}


def _openai_tool(name: str, description: str | None, schema: dict[str, Any]) -> dict[str, Any]:
    function: dict[str, Any] = {"name": name, "parameters": schema}
    if description:
        function["description"] = description
    return {"type": "function", "function": function}


def _tool_choice(request: MessagesInput) -> str | dict[str, Any] | None:
    choice = request.tool_choice
    if choice is None:
        return None
    if choice.type == "any":
        return "required"
    if choice.type == "tool":
        return {"type": "function", "function": {"name": choice.name}}
    return choice.type  # "auto" | "none"


def _thinking_toggle(request: MessagesInput) -> bool | None:
    """enabled/disabled switch a template's thinking toggle; otherwise the model's default
    (a reasoning model is trained to think; a client that wants none says "disabled")."""
    if request.thinking is None or request.thinking.type == "adaptive":
        return None
    return request.thinking.type == "enabled"


def _input(function: dict[str, Any]) -> dict[str, Any]:
    value = json.loads(function.get("arguments") or "{}")
    return value if isinstance(value, dict) else {"value": value}


def _bad_block(index: int, position: int, kind: str, role: str) -> APIError:
    return APIError(
        400,
        f"A {role} message cannot contain a {kind!r} block.",
        param=f"messages[{index}].content[{position}]",
    )
