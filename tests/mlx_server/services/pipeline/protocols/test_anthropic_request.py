"""ProtocolTranslator and the Anthropic renderer: Anthropic requests in, the pipeline's typed
request out; the pipeline's events back out as Anthropic's stream and message.

The stream tests feed canned model outputs through the real event path (ChatTurn and the
pipeline's event assembly), render them as Anthropic events, and let the anthropic SDK's own
accumulator rebuild the message, which must equal the non-stream response.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from anthropic.lib.streaming._messages import accumulate_event

from mlx_server.errors import APIError
from mlx_server.schemas.anthropic import MessagesInput, MessagesRequest
from mlx_server.services.pipeline.engine.params import CompletionStats
from mlx_server.services.pipeline.events import Finish, FinishReason, Reply
from mlx_server.services.pipeline.protocols import anthropic_render
from mlx_server.services.pipeline.protocols.anthropic_request import ProtocolTranslator
from tests.mlx_server.services.pipeline.canned import canned_events, canned_reply, replay

translator = ProtocolTranslator()

WEATHER = {
    "name": "get_weather",
    "description": "Weather for a city",
    "input_schema": {
        "type": "object",
        "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
    },
}


def _internal(**request: Any) -> Any:
    return translator.anthropic_to_internal(MessagesInput.model_validate({"model": "m", **request}), "m")


def test_tool_use_and_tool_result_keep_their_ids_and_order() -> None:
    chat = _internal(
        system=[{"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}}],
        tools=[WEATHER],
        messages=[
            {"role": "user", "content": "Weather in Paris?"},
            {
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": "Use the tool.", "signature": "EqQBCkYIBxgCKkD..."},
                    {"type": "text", "text": "Checking."},
                    {
                        "type": "tool_use",
                        "id": "toolu_01A",
                        "name": "get_weather",
                        "input": {"city": "Paris"},
                    },
                ],
            },
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_01A", "content": "18 °C, sunny"},
                    {"type": "text", "text": "And tomorrow?"},
                ],
            },
        ],
    )
    assert [m.as_openai() for m in chat.messages or ()] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Weather in Paris?"},
        {
            "role": "assistant",
            "content": "Checking.",
            "reasoning_content": "Use the tool.",
            "tool_calls": [
                {
                    "id": "toolu_01A",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "toolu_01A", "content": "18 °C, sunny"},
        {"role": "user", "content": "And tomorrow?"},
    ]
    assert [t.as_openai() for t in chat.tools or ()] == [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "parameters": WEATHER["input_schema"],
                "description": "Weather for a city",
            },
        }
    ]


def test_system_messages_inside_messages_join_the_system_prompt() -> None:
    chat = _internal(
        system="You are a coding agent.",
        messages=[
            {"role": "system", "content": [{"type": "text", "text": "Today is Sunday."}]},
            {"role": "user", "content": "hi"},
        ],
    )
    assert [m.as_openai() for m in chat.messages or ()] == [
        {"role": "system", "content": "You are a coding agent.\n\nToday is Sunday."},
        {"role": "user", "content": "hi"},
    ]


def test_error_results_images_and_redacted_thinking() -> None:
    chat = _internal(
        messages=[
            {"role": "assistant", "content": [{"type": "redacted_thinking", "data": "opaque"}]},
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "t1",
                        "is_error": True,
                        "content": [{"type": "text", "text": "file not found"}],
                    },
                    {
                        "type": "image",
                        "source": {"type": "base64", "media_type": "image/png", "data": "iVBOR"},
                    },
                ],
            },
        ]
    )
    messages = [m.as_openai() for m in chat.messages or ()]
    assert messages[0] == {"role": "assistant", "content": None}
    assert messages[1] == {"role": "tool", "tool_call_id": "t1", "content": "Error: file not found"}
    assert messages[2]["content"] == [
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBOR"}}
    ]


@pytest.mark.parametrize(
    ("choice", "expected", "parallel"),
    [
        ({"type": "auto"}, "auto", True),
        ({"type": "any", "disable_parallel_tool_use": True}, "required", False),
        (
            {"type": "tool", "name": "get_weather"},
            {"type": "function", "function": {"name": "get_weather"}},
            True,
        ),
        ({"type": "none"}, "none", True),
    ],
)
def test_tool_choice_maps_to_the_pipelines(choice: dict[str, Any], expected: Any, parallel: bool) -> None:
    chat = _internal(tools=[WEATHER], tool_choice=choice, messages=[{"role": "user", "content": "x"}])
    assert chat.tool_choice.as_openai() == expected
    assert chat.parallel_tool_calls is parallel


def test_impossible_requests_name_what_to_fix() -> None:
    with pytest.raises(APIError) as no_tools:
        _internal(tool_choice={"type": "any"}, messages=[{"role": "user", "content": "x"}])
    assert no_tools.value.status == 400 and "requires tools" in no_tools.value.message
    with pytest.raises(APIError) as misplaced:
        _internal(
            messages=[
                {"role": "user", "content": [{"type": "tool_use", "id": "a", "name": "f", "input": {}}]}
            ]
        )
    assert misplaced.value.param == "messages[0].content[0]"
    request = MessagesRequest.model_validate(
        {
            "model": "m",
            "max_tokens": 100,
            "thinking": {"type": "enabled", "budget_tokens": 100},
            "messages": [{"role": "user", "content": "x"}],
        }
    )
    with pytest.raises(APIError) as budget:
        translator.generation_params(request)
    assert budget.value.param == "thinking.budget_tokens"


def test_thinking_switch_follows_the_request() -> None:
    base = {"messages": [{"role": "user", "content": "x"}]}
    assert _internal(**base).enable_thinking is None
    assert _internal(**base, thinking={"type": "enabled", "budget_tokens": 2048}).enable_thinking is True
    assert _internal(**base, thinking={"type": "disabled"}).enable_thinking is False


# --- Responses and streams from canned outputs ---

TOOLS = [{"type": "function", "function": {"name": WEATHER["name"], "parameters": WEATHER["input_schema"]}}]
OUTPUTS: dict[str, tuple[str, FinishReason]] = {
    "text": ("The answer is 4.", "stop"),
    "reasoning, text, call": (
        '<think>Need the tool.</think>Let me look.\n<tool_call>{"name": "get_weather", '
        '"arguments": {"city": "Zürich", "days": "2"}}</tool_call>',
        "stop",
    ),
    "cut off": ("Once upon a time", "length"),
}


def _stats() -> CompletionStats:
    return CompletionStats(prompt_tokens=7, completion_tokens=5)


def _anthropic_stream(
    tokenizer: Any, text: str, size: int, reason: FinishReason
) -> list[tuple[str, dict[str, Any]]]:
    events = canned_events(tokenizer, text, size, reason, tools=TOOLS, stats=_stats())

    async def collect() -> list[tuple[str, dict[str, Any]]]:
        return [event async for event in anthropic_render.events(replay(events), "m", 7)]

    return asyncio.run(collect())


def _response(tokenizer: Any, text: str, reason: FinishReason) -> dict[str, Any]:
    return anthropic_render.message("m", canned_reply(tokenizer, text, reason, tools=TOOLS, stats=_stats()))


@pytest.mark.parametrize("name", sorted(OUTPUTS))
@pytest.mark.parametrize("size", [1, 4, 1000])
def test_sdk_accumulated_stream_equals_the_non_stream_message(
    smollm: tuple[Any, Any], name: str, size: int
) -> None:
    text, reason = OUTPUTS[name]
    events = _anthropic_stream(smollm[1], text, size, reason)
    snapshot = None
    json_bufs: dict[int, bytes] = {}
    for _, payload in events:
        snapshot = accumulate_event(event=payload, current_snapshot=snapshot, json_bufs=json_bufs)  # type: ignore[arg-type]
    assert snapshot is not None
    streamed = snapshot.to_dict()
    expected = _response(smollm[1], text, reason)
    assert [b["type"] for b in streamed["content"]] == [b["type"] for b in expected["content"]]
    for got, want in zip(streamed["content"], expected["content"], strict=True):
        if want["type"] == "tool_use":
            assert got["id"].startswith("call_")  # a fresh id per run; both are valid ids
            assert (got["name"], got["input"]) == (want["name"], want["input"])
        else:
            assert got[want["type"]].strip() == want[want["type"]].strip()
    assert streamed["stop_reason"] == expected["stop_reason"]
    # Event names as Anthropic sends them, blocks opened and closed in order.
    names = [name for name, _ in events]
    assert names[:2] == ["message_start", "ping"] and names[-2:] == ["message_delta", "message_stop"]
    assert names.count("content_block_start") == names.count("content_block_stop") == len(expected["content"])
    assert all(name == payload["type"] for name, payload in events)


def test_non_stream_response_blocks_and_stop_reasons(smollm: tuple[Any, Any]) -> None:
    called = _response(smollm[1], *OUTPUTS["reasoning, text, call"])
    assert [b["type"] for b in called["content"]] == ["thinking", "text", "tool_use"]
    assert called["content"][2]["input"] == {"city": "Zürich", "days": 2}  # coerced to the schema
    assert called["stop_reason"] == "tool_use"
    assert called["usage"]["input_tokens"] == 7 and called["usage"]["output_tokens"] == 5
    assert _response(smollm[1], *OUTPUTS["cut off"])["stop_reason"] == "max_tokens"
    assert _response(smollm[1], *OUTPUTS["text"])["stop_reason"] == "end_turn"
    stopped = anthropic_render.message("m", Reply(text="a", finish=Finish("stop", "###")))
    assert (stopped["stop_reason"], stopped["stop_sequence"]) == ("stop_sequence", "###")


def test_tool_input_streams_as_json_deltas(smollm: tuple[Any, Any]) -> None:
    events = _anthropic_stream(smollm[1], OUTPUTS["reasoning, text, call"][0], 3, "stop")
    starts = [p["content_block"] for n, p in events if n == "content_block_start"]
    assert starts[-1]["type"] == "tool_use" and starts[-1]["input"] == {}
    partial = "".join(
        p["delta"]["partial_json"]
        for n, p in events
        if n == "content_block_delta" and p["delta"]["type"] == "input_json_delta"
    )
    assert json.loads(partial) == {"city": "Zürich", "days": 2}
