"""Constrained decoding with the real SmolLM2 through the openai SDK: JSON Schema, JSON objects,
required and named tool calls, streamed and not. Against the session's server (conftest.py): its
prefix cache spares the tests that send the same tools a second prefill."""

from __future__ import annotations

import json
from typing import Any

import openai
import pytest
from jsonschema import Draft202012Validator
from openai.lib.streaming.chat import ChatCompletionStreamState

from mlx_server.models.store import DEFAULT_MODEL_ID
from tests.mlx_server.parsers.grammar_support import CITY_AND_DAYS, GET_TIME, function_tool

MODEL = DEFAULT_MODEL_ID

BRIEF = {"role": "system", "content": "Reply briefly."}

SCHEMAS: dict[str, dict[str, Any]] = {
    "nested object": {
        "type": "object",
        "properties": {
            "city": {"type": "string", "maxLength": 20},
            "location": {
                "type": "object",
                "properties": {"lat": {"type": "number"}, "lon": {"type": "number"}},
                "required": ["lat", "lon"],
                "additionalProperties": False,
            },
        },
        "required": ["city", "location"],
        "additionalProperties": False,
    },
    "enum array": {
        "type": "object",
        "properties": {
            "colors": {
                "type": "array",
                "items": {"enum": ["red", "green", "blue"]},
                "minItems": 1,
                "maxItems": 3,
            }
        },
        "required": ["colors"],
        "additionalProperties": False,
    },
    "bounded integers and optional fields": {
        "type": "object",
        "properties": {
            "age": {"type": "integer", "minimum": 18, "maximum": 99},
            "score": {"type": "integer", "minimum": -5, "maximum": 5},
            "nickname": {"type": "string", "maxLength": 10},
        },
        "required": ["age", "score"],
        "additionalProperties": False,
    },
}

TOOLS: Any = [
    function_tool(
        "get_weather", {**CITY_AND_DAYS, "city": {"type": "string", "maxLength": 20}}, ["city", "days"]
    ),
    GET_TIME,
    function_tool(
        "convert", {"amount": {"type": "number"}, "to": {"type": "string", "maxLength": 3}}, ["amount", "to"]
    ),
]


def _schema_format(schema: dict[str, Any]) -> Any:
    return {"type": "json_schema", "json_schema": {"name": "reply", "schema": schema, "strict": True}}


@pytest.mark.parametrize("name", sorted(SCHEMAS))
def test_json_schema_replies_are_valid_streamed_or_not(oai: openai.OpenAI, name: str) -> None:
    schema = SCHEMAS[name]
    messages: Any = [BRIEF, {"role": "user", "content": f"Give an example ({name})."}]
    reply = oai.chat.completions.create(
        model=MODEL, messages=messages, response_format=_schema_format(schema), temperature=0, max_tokens=80
    )
    content = reply.choices[0].message.content or ""
    assert not list(Draft202012Validator(schema).iter_errors(json.loads(content))), content
    assert reply.choices[0].finish_reason == "stop"

    chunks = oai.chat.completions.create(
        model=MODEL,
        messages=messages,
        response_format=_schema_format(schema),
        temperature=0.8,
        seed=3,
        max_tokens=80,
        stream=True,
    )
    streamed = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert not list(Draft202012Validator(schema).iter_errors(json.loads(streamed))), streamed


def test_json_object_replies_parse_as_objects(oai: openai.OpenAI) -> None:
    reply = oai.chat.completions.create(
        model=MODEL,
        messages=[BRIEF, {"role": "user", "content": "Describe a cat."}],
        response_format={"type": "json_object"},
        temperature=0,
        max_tokens=60,
    )
    assert isinstance(json.loads(reply.choices[0].message.content or ""), dict)


def _check_call(call: Any, names: set[str]) -> None:
    tool = next(t for t in TOOLS if t["function"]["name"] == call.function.name)
    assert call.function.name in names
    arguments = json.loads(call.function.arguments)
    assert not list(Draft202012Validator(tool["function"]["parameters"]).iter_errors(arguments)), arguments


@pytest.mark.parametrize(
    ("tools", "tool_choice", "compare_stream"),
    [
        (TOOLS[:1], "required", True),
        (TOOLS, "required", False),
        (TOOLS, {"type": "function", "function": {"name": "get_time"}}, False),
    ],
    ids=["required, one tool", "required, three tools", "named"],
)
def test_forced_tool_calls_are_always_valid_calls_and_stream_the_same(
    oai: openai.OpenAI, tools: Any, tool_choice: Any, compare_stream: bool
) -> None:
    names = (
        {tool_choice["function"]["name"]}
        if isinstance(tool_choice, dict)
        else {t["function"]["name"] for t in tools}
    )
    args: Any = {
        "model": MODEL,
        "messages": [{"role": "user", "content": "What is the weather in Oslo tomorrow?"}],
        "tools": tools,
        "tool_choice": tool_choice,
        "temperature": 0,
        "max_tokens": 60,
    }
    reply = oai.chat.completions.create(**args)
    assert reply.choices[0].finish_reason == "tool_calls"
    calls = reply.choices[0].message.tool_calls or []
    assert calls
    for call in calls:
        _check_call(call, names)

    if not compare_stream:
        return  # prefill runs ~13 tokens/s here: the stream is compared for the one-tool case
    state = ChatCompletionStreamState()
    for chunk in oai.chat.completions.create(**args, stream=True):
        state.handle_chunk(chunk)
    streamed = state.get_final_completion().choices[0]
    assert streamed.finish_reason == "tool_calls"
    assert [
        (c.function.name, json.loads(c.function.arguments)) for c in streamed.message.tool_calls or []
    ] == [(c.function.name, json.loads(c.function.arguments)) for c in calls]


def test_an_unsupported_schema_keyword_is_a_400_naming_it(oai: openai.OpenAI) -> None:
    schema = {"type": "object", "properties": {"a": {"not": {"type": "string"}}}}
    with pytest.raises(openai.BadRequestError) as caught:
        oai.chat.completions.create(
            model=MODEL,
            messages=[{"role": "user", "content": "x"}],
            response_format=_schema_format(schema),
            max_tokens=5,
        )
    body: Any = caught.value.body
    assert body["param"] == "response_format.json_schema.schema" and '"not"' in body["message"]


def test_a_reply_cut_off_by_max_tokens_is_reported_not_passed_off_as_valid(oai: openai.OpenAI) -> None:
    raw = oai.chat.completions.with_raw_response.create(
        model=MODEL,
        messages=[BRIEF, {"role": "user", "content": "Give an example."}],
        response_format=_schema_format(SCHEMAS["nested object"]),
        temperature=0,
        max_tokens=4,
    )
    body = raw.http_response.json()
    assert body["choices"][0]["finish_reason"] == "length"
    assert "max_tokens ran out" in body["warnings"][0]


def test_a_tight_budget_closes_the_json_instead_of_cutting_it(oai: openai.OpenAI) -> None:
    # Unconstrained, SmolLM2 describes a phone in far more than 30 tokens.
    reply = oai.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "Describe a phone."}],
        response_format={"type": "json_object"},
        temperature=0,
        max_tokens=30,
    )
    assert reply.choices[0].finish_reason == "stop"
    assert isinstance(json.loads(reply.choices[0].message.content or ""), dict)
    assert reply.usage is not None and reply.usage.completion_tokens <= 30
