"""Ollama requests as the pipeline's GenerationRequest: options, format, think and messages."""

from __future__ import annotations

import json

import pytest

from mlx_server.errors import APIError
from mlx_server.schemas.ollama import OllamaChatRequest, OllamaGenerateRequest, OllamaMessage, OllamaOptions
from mlx_server.services.pipeline.protocols.ollama_request import (
    chat_messages,
    chat_request,
    generate_request,
    generation_params,
)


def test_options_map_onto_generation_with_ollamas_defaults_for_the_rest() -> None:
    params = generation_params(
        OllamaOptions(num_predict=12, temperature=0, seed=7, stop="END", repeat_penalty=1.2)
    )
    assert (params.max_tokens, params.stop) == (12, ["END"])
    sampling = params.sampling
    assert (sampling.temperature, sampling.top_k, sampling.top_p) == (0, 40, 0.9)
    assert (sampling.seed, sampling.repetition_penalty) == (7, 1.2)
    assert generation_params(OllamaOptions(num_predict=-1)).max_tokens is None  # no limit: what fits
    with pytest.raises(APIError, match="num_predict must be a number of tokens"):
        generation_params(OllamaOptions(num_predict=0))


def test_tool_results_answer_the_earliest_call_of_their_tool() -> None:
    call = {"function": {"name": "get_weather", "arguments": {"city": "Paris"}}}
    other = {"function": {"name": "get_time", "arguments": {}}}
    messages = [
        OllamaMessage.model_validate(m)
        for m in (
            {"role": "user", "content": "Weather and time in Paris?"},
            {"role": "assistant", "tool_calls": [call, other]},
            {"role": "tool", "tool_name": "get_time", "content": "12:00"},
            {"role": "tool", "tool_name": "get_weather", "content": "sunny"},
        )
    ]
    converted = [m.as_openai() for m in chat_messages(messages)]
    calls = converted[1]["tool_calls"]
    assert [json.loads(c["function"]["arguments"]) for c in calls] == [{"city": "Paris"}, {}]
    assert [m["tool_call_id"] for m in converted[2:]] == [calls[1]["id"], calls[0]["id"]]


def test_images_become_image_parts_before_the_text() -> None:
    request = chat_request(
        OllamaChatRequest(
            model="m", messages=[{"role": "user", "content": "What is it?", "images": ["iVBORw0KGgo="]}]
        ),
        "m",
    )
    assert [image.url for image in request.images] == ["data:application/octet-stream;base64,iVBORw0KGgo="]
    assert request.messages is not None and request.messages[0].as_openai()["content"][-1] == {
        "type": "text",
        "text": "What is it?",
    }


def test_format_and_think_reach_the_request() -> None:
    schema = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}
    request = chat_request(OllamaChatRequest(model="m", messages=[], format=schema, think="high"), "m")
    assert request.output_format is not None and request.output_format.schema == schema
    assert request.enable_thinking is True
    assert chat_request(OllamaChatRequest(model="m", format="json"), "m").output_format is not None


def test_generate_is_a_user_turn_unless_raw() -> None:
    templated = generate_request(OllamaGenerateRequest(model="m", prompt="Hi", system="Be brief."), "m")
    assert [m.as_openai() for m in templated.messages or ()] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hi"},
    ]
    raw = generate_request(OllamaGenerateRequest(model="m", prompt="<|im_start|>user", raw=True), "m")
    assert (raw.prompt, raw.messages) == ("<|im_start|>user", None)


@pytest.mark.parametrize(
    ("fields", "says"),
    [
        ({"suffix": "}"}, "fill-in-the-middle"),
        ({"template": "{{ .Prompt }}"}, "model's own chat template"),
        ({"context": [1, 2]}, "send the conversation to /api/chat"),
        ({"raw": True, "format": "json"}, "Drop raw"),
    ],
)
def test_what_generate_cannot_do_is_a_400_saying_what_to_do(fields: dict[str, object], says: str) -> None:
    with pytest.raises(APIError, match=says) as refused:
        generate_request(OllamaGenerateRequest.model_validate({"model": "m", "prompt": "x", **fields}), "m")
    assert refused.value.status == 400
