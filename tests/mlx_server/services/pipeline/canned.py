"""Canned model outputs through the real pipeline path after the model: the generated text, in
pieces of a chosen size, goes through ChatTurn (StreamingProcessor + parsers + checks) and the
pipeline's event assembly. Renderer tests feed the resulting events to each protocol."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator, Iterable
from typing import Any

from mlx_server.models.adapters import create_adapter
from mlx_server.services.pipeline.chat_turn import ChatTurn
from mlx_server.services.pipeline.engine.params import CompletionStats, GeneratedText
from mlx_server.services.pipeline.events import FinishReason, GenerationEvent, Reply
from mlx_server.services.pipeline.inference import _chat_events
from mlx_server.services.pipeline.protocols.openai_request import chat_tools
from mlx_server.services.pipeline.request import ToolChoice


async def _pieces(text: str, size: int, reason: FinishReason) -> AsyncGenerator[GeneratedText, None]:
    for at in range(0, len(text), size):
        yield GeneratedText(text[at : at + size], [], reason if at + size >= len(text) else None)


def canned_events(
    tokenizer: Any,
    text: str,
    size: int,
    reason: FinishReason = "stop",
    *,
    tools: list[dict[str, Any]] | None,
    tool_choice: ToolChoice | str | None = "auto",
    stats: CompletionStats | None = None,
) -> list[GenerationEvent]:
    """The events a model writing `text` produces (a Qwen adapter: hermes calls, <think>)."""
    choice = tool_choice if isinstance(tool_choice, ToolChoice) else ToolChoice(tool_choice or "auto")
    turn = ChatTurn(create_adapter("qwen", tokenizer), prompt="", tools=chat_tools(tools), tool_choice=choice)
    figures = stats if stats is not None else CompletionStats()

    async def run() -> list[GenerationEvent]:
        return [event async for event in _chat_events(_pieces(text, size, reason), turn, figures)]

    return asyncio.run(run())


def canned_reply(tokenizer: Any, text: str, reason: FinishReason = "stop", **kwargs: Any) -> Reply:
    """The whole reply, as a non-streamed response folds it."""
    reply = Reply()
    for event in canned_events(tokenizer, text, max(len(text), 1), reason, **kwargs):
        reply.add(event)
    return reply


async def replay(events: Iterable[GenerationEvent]) -> AsyncIterator[GenerationEvent]:
    for event in events:
        yield event
