"""Canned model outputs through the real chat path and the OpenAI renderer, accumulated by the
openai SDK.

The model is replaced by fixed text (SmolLM2 does not reliably call tools), everything after it
is the production path: ChatTurn (StreamingProcessor + parser + checks), the pipeline's events,
and the OpenAI chunk renderer; the SDK's own accumulator rebuilds the message from the chunks.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from openai.lib.streaming.chat import ChatCompletionStreamState
from openai.types.chat import ChatCompletionChunk

from mlx_server.services.pipeline.events import TextDelta
from mlx_server.services.pipeline.protocols import openai_render
from tests.mlx_server.services.pipeline.canned import canned_events, canned_reply, replay

TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
            },
        },
    },
    {
        "type": "function",
        "function": {"name": "get_time", "parameters": {"type": "object", "properties": {}}},
    },
]

OUTPUTS = {
    "two calls around text": (
        "Let me check both.\n<tool_call>\n"
        '{"name": "get_weather", "arguments": {"city": "Zürich", "days": "3"}}\n</tool_call>\n'
        '<tool_call>\n{"name": "get_time", "arguments": {}}\n</tool_call>'
    ),
    "reasoning then a call": (
        "<think>The user wants the weather.</think>"
        '<tool_call>{"name": "get_weather", "arguments": {"city": "東京"}}</tool_call>'
    ),
    "a call and its duplicate": (
        '<tool_call>{"name": "get_time", "arguments": {}}</tool_call>'
        '<tool_call>{"name": "get_time", "arguments": {}}</tool_call>'
    ),
    "no call": "<think>Easy.</think>The answer is 4.",
}


def _stream(tokenizer: Any, text: str, size: int) -> list[dict[str, Any]]:
    events = canned_events(tokenizer, text, size, tools=TOOLS)

    async def collect() -> list[dict[str, Any]]:
        return [chunk async for chunk in openai_render.chat_chunks(replay(events), "m", include_usage=False)]

    return asyncio.run(collect())


def _batch(tokenizer: Any, text: str, **kwargs: Any) -> tuple[dict[str, Any], str | None]:
    reply = canned_reply(tokenizer, text, **{"tools": TOOLS, **kwargs})
    return openai_render.chat_message(reply), reply.finish.reason if reply.finish else None


@pytest.mark.parametrize("name", sorted(OUTPUTS))
@pytest.mark.parametrize("size", [1, 3, 7, 1000])
def test_sdk_accumulated_stream_equals_the_non_stream_message(
    smollm: tuple[Any, Any], name: str, size: int
) -> None:
    tokenizer = smollm[1]
    chunks = _stream(tokenizer, OUTPUTS[name], size)
    state = ChatCompletionStreamState(input_tools=TOOLS)  # type: ignore[arg-type]
    for chunk in chunks:
        state.handle_chunk(ChatCompletionChunk.model_validate(chunk))
    streamed = state.get_final_completion().choices[0]
    message, finish_reason = _batch(tokenizer, OUTPUTS[name])

    assert streamed.finish_reason == finish_reason
    assert (streamed.message.content or "").strip() == (message["content"] or "").strip()
    expected_calls = [
        (c["function"]["name"], json.loads(c["function"]["arguments"])) for c in message.get("tool_calls", [])
    ]
    got_calls = [
        (c.function.name, json.loads(c.function.arguments)) for c in streamed.message.tool_calls or []
    ]
    assert got_calls == expected_calls
    # Each call streamed as OpenAI does: id, type and name in its first delta, then arguments.
    firsts = [d for c in chunks for d in (c["choices"][0]["delta"].get("tool_calls") or []) if "id" in d]
    assert [d["index"] for d in firsts] == list(range(len(expected_calls)))
    assert all(d["id"].startswith("call_") and d["type"] == "function" for d in firsts)
    reasoning = "".join(c["choices"][0]["delta"].get("reasoning_content", "") for c in chunks)
    assert reasoning.strip() == (message.get("reasoning_content") or "").strip()
    assert "<tool_call>" not in (streamed.message.content or "") and "<think>" not in reasoning


def test_the_checked_calls_are_typed_deduplicated_and_finish_with_tool_calls(smollm: tuple[Any, Any]) -> None:
    message, finish_reason = _batch(smollm[1], OUTPUTS["two calls around text"])
    assert finish_reason == "tool_calls"
    assert message["content"] == "Let me check both."
    assert [json.loads(c["function"]["arguments"]) for c in message["tool_calls"]] == [
        {"city": "Zürich", "days": 3},
        {},
    ]
    duplicate, _ = _batch(smollm[1], OUTPUTS["a call and its duplicate"])
    assert len(duplicate["tool_calls"]) == 1 and duplicate["content"] is None
    plain, reason = _batch(smollm[1], OUTPUTS["no call"])
    assert plain == {"role": "assistant", "content": "The answer is 4.", "reasoning_content": "Easy."}
    assert reason == "stop"


@pytest.mark.parametrize("tool_choice", [None, "none"])
def test_without_tools_a_call_shaped_reply_stays_text(
    smollm: tuple[Any, Any], tool_choice: str | None
) -> None:
    """No tool was offered (or tool_choice "none"): the model's call markup is its answer's text,
    not a call, and it does not vanish."""
    text = "Let me check.\n" + OUTPUTS["two calls around text"].split("\n", 1)[1]
    tools = TOOLS if tool_choice == "none" else None
    events = canned_events(smollm[1], text, 20, tools=tools, tool_choice=tool_choice)
    streamed = "".join(e.text for e in events if isinstance(e, TextDelta))
    message, finish_reason = _batch(smollm[1], text, tools=tools, tool_choice=tool_choice)
    assert "tool_calls" not in message and finish_reason == "stop"
    assert '"name": "get_weather"' in message["content"] and '"name": "get_time"' in message["content"]
    assert message["content"].startswith("Let me check.")
    assert streamed.strip() == message["content"]
