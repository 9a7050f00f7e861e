"""The real Qwen2.5-Coder-0.5B-Instruct (imported from its GGUF by our importer) behind
`mlx-manager serve`, through each protocol's own client: it answers, a declared tool comes back
as a tool call on every protocol (the model writes a fenced JSON call, not its template's
<tool_call> tags: services/pipeline/json_calls.py takes it), tool_choice required gives
schema-valid arguments, and the probe finds its family and tool format.

The server is shared by every test of a worker (tests/conftest.py::qwen_server); prompts are
short and replies capped at a few dozen tokens."""

from __future__ import annotations

import json
import time
from typing import Any

import anthropic
import httpx
import ollama
import openai
from jsonschema import Draft202012Validator

from tests.support import ServerProcess, csrf_headers

MODEL = "qwen"
QUESTION = "What is the weather in Paris?"
WEATHER_SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather in a city",
        "parameters": WEATHER_SCHEMA,
    },
}
PARIS = ("get_weather", {"city": "Paris"})
CALL_TOKENS = 64  # the fenced call Qwen writes is ~35 tokens


def _openai(server: ServerProcess) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server.url}/v1", api_key="x", max_retries=0, timeout=300)


def test_qwen_answers_a_question(qwen_server: ServerProcess) -> None:
    reply = _openai(qwen_server).chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "What is the capital of France?"}],
        temperature=0,
        max_tokens=12,
    )
    assert "Paris" in (reply.choices[0].message.content or "")


def _openai_streamed_call(server: ServerProcess) -> tuple[list[tuple[str, Any]], str | None]:
    stream = _openai(server).chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": QUESTION}],
        tools=[WEATHER],  # type: ignore[list-item]
        temperature=0,
        max_tokens=CALL_TOKENS,
        stream=True,
    )
    names: dict[int, str] = {}
    arguments: dict[int, str] = {}
    finish = None
    for chunk in stream:
        choice = chunk.choices[0]
        for call in choice.delta.tool_calls or []:
            if call.function and call.function.name:
                names[call.index] = call.function.name
            arguments[call.index] = arguments.get(call.index, "") + (
                (call.function and call.function.arguments) or ""
            )
        finish = choice.finish_reason or finish
    return [(names[i], json.loads(arguments[i])) for i in sorted(names)], finish


def test_a_declared_tool_comes_back_as_a_tool_call_on_every_protocol(qwen_server: ServerProcess) -> None:
    calls, finish = _openai_streamed_call(qwen_server)
    assert (calls, finish) == ([PARIS], "tool_calls")

    function = WEATHER["function"]
    response = _openai(qwen_server).responses.create(
        model=MODEL,
        input=QUESTION,
        tools=[{"type": "function", "strict": False, **function}],  # type: ignore[list-item]
        temperature=0,
        max_output_tokens=CALL_TOKENS,
    )
    items = [(i.name, json.loads(i.arguments)) for i in response.output if i.type == "function_call"]
    assert items == [PARIS]

    claude = anthropic.Anthropic(base_url=qwen_server.url, api_key="x", max_retries=0, timeout=300)
    message = claude.messages.create(
        model=MODEL,
        max_tokens=CALL_TOKENS,
        extra_body={"temperature": 0},  # this SDK version takes no temperature argument
        messages=[{"role": "user", "content": QUESTION}],
        tools=[
            {"name": "get_weather", "description": function["description"], "input_schema": WEATHER_SCHEMA}
        ],
    )
    assert [(b.name, b.input) for b in message.content if b.type == "tool_use"] == [PARIS]
    assert message.stop_reason == "tool_use"

    reply = ollama.Client(host=qwen_server.url, timeout=300).chat(
        model=MODEL,
        messages=[{"role": "user", "content": QUESTION}],
        tools=[WEATHER],
        options={"temperature": 0, "num_predict": CALL_TOKENS},
    )
    assert [(c.function.name, dict(c.function.arguments)) for c in reply.message.tool_calls or []] == [PARIS]


def test_tool_choice_required_gives_schema_valid_arguments(qwen_server: ServerProcess) -> None:
    schema = {
        "type": "object",
        "properties": {
            "city": {"type": "string"},
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            "days": {"type": "integer", "minimum": 1, "maximum": 7},
        },
        "required": ["city", "unit", "days"],
        "additionalProperties": False,
    }
    tool = {"type": "function", "function": {"name": "get_forecast", "parameters": schema}}
    reply = _openai(qwen_server).chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "Forecast for Lyon for the next three days, in celsius."}],
        tools=[tool],  # type: ignore[list-item]
        tool_choice="required",
        temperature=0,
        max_tokens=CALL_TOKENS,
    )
    [call] = reply.choices[0].message.tool_calls or []
    arguments = json.loads(call.function.arguments)  # type: ignore[union-attr]
    assert call.function.name == "get_forecast"  # type: ignore[union-attr]
    assert list(Draft202012Validator(schema).iter_errors(arguments)) == []
    assert reply.choices[0].finish_reason == "tool_calls"


def test_the_probe_finds_qwen_family_and_its_tool_format(qwen_server: ServerProcess) -> None:
    """Started from the dashboard as a user does; its page shows what it stored."""
    with httpx.Client(base_url=qwen_server.url, timeout=60) as client:
        started = client.post(f"/models/{MODEL}/probe", headers=csrf_headers(client) | {"HX-Request": "true"})
        assert started.status_code == 200
        deadline = time.monotonic() + 600
        page = ""
        while time.monotonic() < deadline and "Probed" not in page:
            time.sleep(2)
            page = client.get(f"/models/{MODEL}").text
    assert "text-gen / qwen" in page
    assert "<code>hermes_json</code> — verified (native)" in page
