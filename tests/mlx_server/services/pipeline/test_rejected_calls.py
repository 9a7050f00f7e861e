"""A tool call the checker rejects is never a silent empty reply: with tool_choice auto the
model's text comes back as content, and every protocol says a call was rejected and why (the
`warnings` of a whole reply, the last event of a stream; the header and the audit row are
tested on the server in tests/mlx_server/api/test_rejected_call_replay.py)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterable
from typing import Any

import pytest

from mlx_server.services.pipeline.engine.params import CompletionStats
from mlx_server.services.pipeline.events import Notice, TextDelta, ToolCallRejected
from mlx_server.services.pipeline.protocols import anthropic_render, ollama_render, openai_render
from mlx_server.services.pipeline.protocols.ollama_render import RequestClock
from mlx_server.services.pipeline.protocols.responses_render import ResponseBuilder
from tests.mlx_server.services.pipeline.canned import canned_events, canned_reply, replay
from tests.mlx_server.services.pipeline.test_tool_streaming import TOOLS

# What SmolLM2 wrote after a tool result in the openai-agents loop of issue #30: the tool
# prompt's example name, a tool that was never declared.
UNDECLARED = '<tool_call>\n{"name": "tool_name", "arguments": {"city": "Paris"}}\n</tool_call>'
REASON = "'tool_name' is not a declared tool"


async def _all(items: AsyncIterable[Any]) -> list[Any]:
    return [item async for item in items]


@pytest.mark.parametrize("size", [1, 5, 1000])
def test_a_rejected_call_comes_back_as_content_with_the_reason(smollm: tuple[Any, Any], size: int) -> None:
    stats = CompletionStats()
    events = canned_events(smollm[1], UNDECLARED, size, tools=TOOLS, stats=stats)
    assert [e.reason for e in events if isinstance(e, ToolCallRejected)] == [REASON]
    content = "".join(e.text for e in events if isinstance(e, TextDelta))
    assert '"name": "tool_name"' in content and "<tool_call>" in content
    notices = [e.message for e in events if isinstance(e, Notice)]
    assert notices == [f"A tool call was rejected: {REASON} (its text is returned as content)"]
    assert stats.rejected_calls == [REASON] and stats.notices == notices  # the audit row's


def test_the_whole_reply_of_each_protocol_carries_the_text_and_the_warning(smollm: tuple[Any, Any]) -> None:
    reply = canned_reply(smollm[1], UNDECLARED, tools=TOOLS)
    openai = openai_render.chat_completion("m", reply, logprobs=False)
    message = openai["choices"][0]["message"]
    assert '"tool_name"' in message["content"] and "tool_calls" not in message
    assert openai["choices"][0]["finish_reason"] == "stop" and REASON in openai["warnings"][0]
    anthropic = anthropic_render.message("m", reply)
    assert anthropic["content"][0]["type"] == "text" and '"tool_name"' in anthropic["content"][0]["text"]
    assert REASON in anthropic["warnings"][0]
    ollama = ollama_render.reply("chat", "m", reply, RequestClock(), CompletionStats())
    assert '"tool_name"' in ollama["message"]["content"] and REASON in ollama["warnings"][0]


def test_every_stream_ends_with_the_warning(smollm: tuple[Any, Any]) -> None:
    events = canned_events(smollm[1], UNDECLARED, 4, tools=TOOLS)
    chunks = asyncio.run(_all(openai_render.chat_chunks(replay(events), "m", include_usage=False)))
    finish = [c for c in chunks if c["choices"][0]["finish_reason"]]
    assert finish[0]["choices"][0]["finish_reason"] == "stop" and REASON in finish[0]["warnings"][0]
    assert '"tool_name"' in "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks)
    messages = asyncio.run(_all(anthropic_render.events(replay(events), "m", 10)))
    delta = next(body for name, body in messages if name == "message_delta")
    assert REASON in delta["warnings"][0]
    lines = asyncio.run(
        _all(ollama_render.chunks("chat", replay(events), "m", RequestClock(), CompletionStats()))
    )
    assert lines[-1]["done"] and REASON in lines[-1]["warnings"][0]
    builder = ResponseBuilder({"model": "m"})
    for event in events:
        builder.add(event)
    final = builder.end()[-1]["response"]
    assert REASON in final["warnings"][0] and '"tool_name"' in final["output"][0]["content"][0]["text"]


def test_a_reply_of_markup_alone_is_not_silent(smollm: tuple[Any, Any]) -> None:
    reply = canned_reply(smollm[1], "<tool_call></tool_call>", tools=TOOLS)
    assert reply.text.strip() == "" and not reply.tool_calls
    assert reply.notices and "no text and no tool call" in reply.notices[0]
