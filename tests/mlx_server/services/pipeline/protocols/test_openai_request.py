"""OpenAI chat bodies as the pipeline's GenerationRequest: messages and tools typed once, and
what cannot be typed refused with a 400 naming the field."""

from __future__ import annotations

from typing import Any

import pytest

from mlx_server.errors import APIError
from mlx_server.schemas.openai import ChatCompletionRequest
from mlx_server.services.pipeline.protocols.openai_request import chat_request
from mlx_server.services.pipeline.request import ImagePart, Message, TextPart, Tool

URL = "data:image/png;base64,iVBORw0KGgo="
CALL = {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}


def _request(**body: Any) -> Any:
    return chat_request(ChatCompletionRequest.model_validate({"model": "m", **body}), "m")


def test_messages_and_tools_arrive_typed_and_render_back_unchanged() -> None:
    messages = [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "Which city?"},
                {"type": "image_url", "image_url": {"url": URL, "detail": "low"}},
            ],
        },
        {"role": "assistant", "content": None, "tool_calls": [CALL], "reasoning_content": "Look."},
        {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
    ]
    tool = {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}
    request = _request(messages=messages, tools=[tool])
    assert request.messages[0] == Message("user", (TextPart("Which city?"), ImagePart(URL, "low")))
    assert request.messages[1].reasoning == "Look." and request.messages[1].tool_calls[0].id == "c1"
    assert request.tools == (Tool("get_weather", None, {"type": "object"}),)
    assert [m.as_openai() for m in request.messages] == messages  # the template's form is the client's
    assert request.images == (ImagePart(URL, "low"),)


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"messages": [{"role": "user", "content": [{"type": "input_audio"}]}]}, "messages[0].content[0]"),
        (
            {"messages": [{"role": "user", "content": [{"type": "image_url"}]}]},
            "messages[0].content[0].image_url",
        ),
        ({"tools": [{"type": "function", "function": {"description": "no name"}}]}, "tools[0]"),
        ({"tools": [{"type": "retrieval"}]}, "tools[0]"),
    ],
)
def test_parts_and_tools_the_pipeline_cannot_type_are_400s_naming_them(
    body: dict[str, Any], param: str
) -> None:
    body.setdefault("messages", [{"role": "user", "content": "hi"}])
    with pytest.raises(APIError) as caught:
        _request(**body)
    assert (caught.value.status, caught.value.param) == (400, param)
