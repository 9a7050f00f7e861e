"""The Responses API renderer and request conversion, fed the pipeline's own typed events and
the schema's own items (no model): event order and numbering, the items they build, and how a
conversation of items becomes chat messages."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from mlx_server.errors import APIError
from mlx_server.schemas.openai import FunctionCall, ToolCall
from mlx_server.schemas.responses import ResponseRequest
from mlx_server.services.pipeline.events import (
    Finish,
    GenerationEvent,
    ReasoningDelta,
    TextDelta,
    ToolCallDelta,
    ToolCallDone,
    ToolCallStarted,
    Usage,
)
from mlx_server.services.pipeline.protocols.responses_render import (
    ResponseBuilder,
    response_events,
    response_object,
)
from mlx_server.services.pipeline.protocols.responses_request import input_items, responses_to_internal

CALL = ToolCall(id="call_1", function=FunctionCall(name="get_weather", arguments='{"city": "Paris"}'))


def _reply(*events: GenerationEvent) -> list[GenerationEvent]:
    return [*events, Usage(prompt_tokens=30, completion_tokens=12, cached_prompt_tokens=4)]


async def _aiter(events: list[GenerationEvent]) -> AsyncIterator[GenerationEvent]:
    for event in events:
        yield event


def _render(events: list[GenerationEvent]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    async def run() -> tuple[list[dict[str, Any]], dict[str, Any]]:
        builder = ResponseBuilder({"model": "m"})
        streamed = [payload async for payload in response_events(_aiter(events), builder)]
        return streamed, await response_object(_aiter(events), ResponseBuilder({"model": "m"}))

    return asyncio.run(run())


def test_thinking_text_and_a_call_stream_as_three_items_numbered_in_order() -> None:
    streamed, whole = _render(
        _reply(
            ReasoningDelta("The user wants "),
            ReasoningDelta("the weather."),
            TextDelta("\n\n"),
            TextDelta("Let me check."),
            ToolCallStarted(0, "call_1", "get_weather"),
            ToolCallDelta(0, CALL.function.arguments),
            ToolCallDone(0, CALL),
            Finish("tool_calls"),
        )
    )
    assert [e["sequence_number"] for e in streamed] == list(range(len(streamed)))
    assert [e["type"].removeprefix("response.") for e in streamed] == [
        "created",
        "in_progress",
        "output_item.added",
        "reasoning_summary_part.added",
        "reasoning_summary_text.delta",
        "reasoning_summary_text.delta",
        "reasoning_summary_text.done",
        "reasoning_summary_part.done",
        "output_item.done",
        "output_item.added",
        "content_part.added",
        "output_text.delta",
        "output_text.done",
        "content_part.done",
        "output_item.done",
        "output_item.added",
        "function_call_arguments.delta",
        "function_call_arguments.done",
        "output_item.done",
        "completed",
    ]
    final = streamed[-1]["response"]
    reasoning, message, call = final["output"]
    assert reasoning["summary"] == [{"type": "summary_text", "text": "The user wants the weather."}]
    # The blank line between thinking and answer is layout, not part of the answer.
    assert message["content"][0]["text"] == "Let me check."
    assert (call["call_id"], call["name"], call["arguments"]) == (
        "call_1",
        "get_weather",
        '{"city": "Paris"}',
    )
    assert [e["item"] for e in streamed if e["type"] == "response.output_item.done"] == final["output"]
    assert final["status"] == "completed" and final["incomplete_details"] is None
    assert final["usage"] == {
        "input_tokens": 30,
        "input_tokens_details": {"cached_tokens": 4},
        "output_tokens": 12,
        "output_tokens_details": {"reasoning_tokens": 2},
        "total_tokens": 42,
    }
    # The non-streamed object is the stream's final one (ids and times aside).
    assert [_shape(item) for item in whole["output"]] == [_shape(item) for item in final["output"]]


def _shape(item: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in item.items() if key != "id"}


def test_max_output_tokens_running_out_is_an_incomplete_response() -> None:
    streamed, whole = _render(_reply(TextDelta("Once upon"), Finish("length")))
    assert streamed[-1]["type"] == "response.incomplete"
    assert whole["status"] == "incomplete"
    assert whole["incomplete_details"] == {"reason": "max_output_tokens"}
    assert whole["output"][0]["status"] == "incomplete"


def test_an_empty_reply_is_still_one_empty_message() -> None:
    _, whole = _render(_reply(TextDelta("  "), Finish("stop")))
    assert [item["type"] for item in whole["output"]] == ["message"]
    assert whole["output"][0]["content"][0]["text"] == ""


def test_items_become_one_chat_conversation_with_the_calls_and_results_in_place() -> None:
    body = ResponseRequest.model_validate(
        {
            "model": "m",
            "instructions": "Be brief.",
            "input": [
                {"role": "user", "content": [{"type": "input_text", "text": "Weather in Paris?"}]},
                {"type": "reasoning", "summary": [{"type": "summary_text", "text": "Use the tool."}]},
                {"type": "function_call", "call_id": "c1", "name": "get_weather", "arguments": "{}"},
                {"type": "function_call_output", "call_id": "c1", "output": "18 degrees"},
                {"role": "developer", "content": "Answer in French."},
            ],
        }
    )
    items = input_items(body)
    assert all(item["id"] for item in items)
    request = responses_to_internal(body, "m", [], items)
    assert [m.as_openai() for m in request.messages or ()] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Weather in Paris?"},
        {
            "role": "assistant",
            "content": None,
            "reasoning_content": "Use the tool.",
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "18 degrees"},
        {"role": "system", "content": "Answer in French."},
    ]


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"input": [{"type": "function_call_output", "call_id": "x", "output": "1"}]}, "input[0].call_id"),
        ({"input": "hi", "tool_choice": "required"}, "tool_choice"),
        ({"input": [{"role": "user", "content": [{"type": "input_image", "file_id": "f"}]}]}, None),
        ({"input": "hi", "text": {"format": {"type": "json_schema", "name": "x"}}}, "text.format.schema"),
        (
            {"input": "hi", "text": {"format": {"type": "json_schema", "name": "x", "schema": {"type": 5}}}},
            "text.format.schema",
        ),
    ],
)
def test_requests_the_pipeline_cannot_serve_are_400s_naming_the_field(
    body: dict[str, Any], param: str
) -> None:
    request = ResponseRequest.model_validate({"model": "m", **body})
    with pytest.raises(APIError) as caught:
        responses_to_internal(request, "m", [], input_items(request))
    assert caught.value.status == 400
    assert caught.value.param == (param or "input[0].content[0].image_url")


def test_reasoning_effort_switches_the_templates_thinking() -> None:
    def toggle(reasoning: dict[str, Any] | None) -> bool | None:
        return ResponseRequest.model_validate(
            {"model": "m", "input": "x", "reasoning": reasoning}
        ).thinking_toggle

    assert (toggle(None), toggle({"effort": "none"}), toggle({"effort": "high"})) == (None, False, True)


def test_an_input_image_becomes_the_pipelines_image_part() -> None:
    url = "data:image/png;base64,iVBORw0KGgo="
    content = [
        {"type": "input_text", "text": "What is this?"},
        {"type": "input_image", "image_url": url, "detail": "low"},
    ]
    body = ResponseRequest.model_validate({"model": "m", "input": [{"role": "user", "content": content}]})
    request = responses_to_internal(body, "m", [], input_items(body))
    assert [m.as_openai() for m in request.messages or ()] == [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "What is this?"},
                {"type": "image_url", "image_url": {"url": url, "detail": "low"}},
            ],
        }
    ]
    assert [(image.url, image.detail) for image in request.images] == [(url, "low")]
