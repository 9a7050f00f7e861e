"""Structured output and forced tool calls on the default model, through the openai SDK.

Acceptance run of constrained decoding (one `mlx-manager serve`, fresh home):
- 20 JSON Schemas x (non-stream, stream): share of replies valid for their schema;
- json_object: share of replies that parse as objects;
- tool_choice "required" with 1 and 3 tools, and a named function, 20 prompts each: share with
  finish_reason "tool_calls" and schema-valid arguments, and whether the stream reassembles to
  the same calls;
- decode tokens/s under a JSON Schema vs unconstrained, same prompt.

    python -m mlx_server.benchmark.structured [--write docs/benchmarks.md]
"""

from __future__ import annotations

import json
import statistics
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import openai
from jsonschema import Draft202012Validator

from mlx_server.benchmark._server import running_server
from mlx_server.benchmark.report import bench_arguments, publish
from mlx_server.models.store import DEFAULT_MODEL_ID

MODEL = DEFAULT_MODEL_ID
START, END = "<!-- structured-benchmark:start -->", "<!-- structured-benchmark:end -->"
SYSTEM = {"role": "system", "content": "You produce example data."}


def _obj(
    properties: dict[str, Any], required: list[str] | None = None, closed: bool = True
) -> dict[str, Any]:
    schema: dict[str, Any] = {
        "type": "object",
        "properties": properties,
        "required": required or list(properties),
    }
    if closed:
        schema["additionalProperties"] = False
    return schema


S = {"type": "string", "maxLength": 24}
SCHEMAS: list[tuple[str, dict[str, Any]]] = [
    ("person", _obj({"name": S, "age": {"type": "integer", "minimum": 0, "maximum": 120}})),
    ("city", _obj({"city": S, "population": {"type": "integer", "minimum": 1}})),
    ("point", _obj({"x": {"type": "number"}, "y": {"type": "number"}})),
    (
        "flags",
        _obj({"enabled": {"type": "boolean"}, "retries": {"type": "integer", "minimum": 0, "maximum": 5}}),
    ),
    ("color", _obj({"color": {"enum": ["red", "green", "blue"]}})),
    ("tags", _obj({"tags": {"type": "array", "items": S, "minItems": 1, "maxItems": 4}})),
    (
        "matrix",
        _obj(
            {
                "rows": {
                    "type": "array",
                    "items": {"type": "array", "items": {"type": "integer"}, "maxItems": 3},
                    "maxItems": 3,
                }
            }
        ),
    ),
    (
        "address",
        _obj(
            {
                "street": S,
                "zip": {"type": "string", "pattern": "^[0-9]{5}$"},
                "country": {"enum": ["FR", "DE", "IT"]},
            }
        ),
    ),
    (
        "order",
        _obj(
            {
                "id": {"type": "integer", "minimum": 1},
                "items": {
                    "type": "array",
                    "items": _obj({"sku": S, "qty": {"type": "integer", "minimum": 1, "maximum": 9}}),
                    "maxItems": 3,
                },
            }
        ),
    ),
    ("nested", _obj({"user": _obj({"name": S, "contact": _obj({"email": S, "phone": S}, ["email"])})})),
    (
        "optional fields",
        _obj({"title": S, "subtitle": S, "pages": {"type": "integer", "minimum": 1}}, ["title"]),
    ),
    ("open object", _obj({"kind": S}, closed=False)),
    ("rating", _obj({"stars": {"type": "integer", "minimum": 1, "maximum": 5}, "comment": S})),
    (
        "temperature",
        _obj({"celsius": {"type": "number", "minimum": -50, "maximum": 60}, "unit": {"const": "C"}}),
    ),
    (
        "event",
        _obj(
            {
                "name": S,
                "day": {"enum": ["mon", "tue", "wed", "thu", "fri"]},
                "hours": {"type": "integer", "minimum": 1, "maximum": 12},
            }
        ),
    ),
    (
        "inventory",
        _obj(
            {
                "counts": _obj(
                    {"apples": {"type": "integer", "minimum": 0}, "pears": {"type": "integer", "minimum": 0}}
                )
            }
        ),
    ),
    ("nullable", _obj({"name": S, "nickname": {"type": ["string", "null"], "maxLength": 12}})),
    ("any of", _obj({"value": {"anyOf": [{"type": "integer"}, {"type": "boolean"}]}})),
    (
        "list of points",
        _obj(
            {
                "points": {
                    "type": "array",
                    "items": _obj({"x": {"type": "integer"}, "y": {"type": "integer"}}),
                    "minItems": 1,
                    "maxItems": 3,
                }
            }
        ),
    ),
    (
        "survey",
        _obj(
            {
                "answers": {
                    "type": "array",
                    "items": {"enum": ["yes", "no", "maybe"]},
                    "minItems": 2,
                    "maxItems": 5,
                },
                "score": {"type": "number", "minimum": 0, "maximum": 1},
            }
        ),
    ),
]

TOOL_WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": _obj({"city": S, "days": {"type": "integer", "minimum": 1, "maximum": 7}}),
    },
}
TOOL_TIME = {
    "type": "function",
    "function": {"name": "get_time", "parameters": _obj({"tz": {"enum": ["UTC", "CET", "JST"]}})},
}
TOOL_CONVERT = {
    "type": "function",
    "function": {
        "name": "convert",
        "parameters": _obj({"amount": {"type": "number"}, "to": {"type": "string", "maxLength": 3}}),
    },
}
PROMPTS = [
    "What's the weather in Oslo tomorrow?",
    "Is it raining in Paris?",
    "Weather for Rome this week?",
    "Will it snow in Oslo?",
    "Forecast for Berlin in 3 days?",
    "How warm is Madrid?",
    "Weather in Tokyo now?",
    "Temperature in Cairo?",
    "Is it sunny in Lisbon?",
    "Weather in New York for 2 days?",
    "What time is it in Tokyo?",
    "Convert 20 euros to dollars.",
    "Weather in London?",
    "Should I bring an umbrella in Dublin?",
    "Weather in Vienna for 5 days?",
    "Is it windy in Chicago?",
    "How cold is Helsinki?",
    "Weather in Sydney tomorrow?",
    "Weather in Zürich?",
    "Forecast for 東京?",
]


def _valid(schema: dict[str, Any], value: Any) -> bool:
    return not list(Draft202012Validator(schema).iter_errors(value))


def _json(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return None


def run_schemas(client: openai.OpenAI) -> tuple[int, int, int]:
    valid_plain = valid_stream = 0
    for name, schema in SCHEMAS:
        fmt: Any = {
            "type": "json_schema",
            "json_schema": {"name": name.replace(" ", "_"), "schema": schema, "strict": True},
        }
        messages: Any = [SYSTEM, {"role": "user", "content": f"Give one {name} example."}]
        reply = client.chat.completions.create(
            model=MODEL, messages=messages, response_format=fmt, temperature=0, max_tokens=200
        )
        valid_plain += _valid(schema, _json(reply.choices[0].message.content or ""))
        chunks = client.chat.completions.create(
            model=MODEL,
            messages=messages,
            response_format=fmt,
            temperature=0.7,
            seed=1,
            max_tokens=200,
            stream=True,
        )
        valid_stream += _valid(
            schema, _json("".join(c.choices[0].delta.content or "" for c in chunks if c.choices))
        )
    return valid_plain, valid_stream, len(SCHEMAS)


def run_json_object(client: openai.OpenAI) -> tuple[int, int]:
    ok = 0
    subjects = [
        "a cat",
        "a car",
        "a book",
        "a city",
        "a song",
        "a tree",
        "a phone",
        "a river",
        "a chair",
        "a game",
    ]
    for subject in subjects:
        messages: Any = [SYSTEM, {"role": "user", "content": f"Describe {subject} in a few words."}]
        reply = client.chat.completions.create(
            model=MODEL,
            messages=messages,
            response_format={"type": "json_object"},
            temperature=0,
            max_tokens=256,
        )
        ok += isinstance(_json(reply.choices[0].message.content or ""), dict)
    return ok, len(subjects)


def _calls(message: Any) -> list[tuple[str, Any]]:
    return [(c.function.name, json.loads(c.function.arguments)) for c in message.tool_calls or []]


def run_tools(client: openai.OpenAI, tools: list[Any], tool_choice: Any) -> tuple[int, int, int]:
    schemas = {t["function"]["name"]: t["function"]["parameters"] for t in tools}
    allowed = {tool_choice["function"]["name"]} if isinstance(tool_choice, dict) else set(schemas)
    ok = same_stream = 0
    for prompt in PROMPTS:
        args: Any = {
            "model": MODEL,
            "messages": [{"role": "user", "content": prompt}],
            "tools": tools,
            "tool_choice": tool_choice,
            "temperature": 0,
            "max_tokens": 80,
        }
        reply = client.chat.completions.create(**args)
        calls = _calls(reply.choices[0].message)
        ok += (
            reply.choices[0].finish_reason == "tool_calls"
            and bool(calls)
            and all(name in allowed and _valid(schemas[name], arguments) for name, arguments in calls)
        )
        with client.chat.completions.stream(**args) as stream:
            final = stream.get_final_completion()
        same_stream += _calls(final.choices[0].message) == calls
    return ok, same_stream, len(PROMPTS)


def decode_speed(client: openai.OpenAI, constrained: bool, tokens: int) -> float:
    args: Any = {
        "model": MODEL,
        "messages": [SYSTEM, {"role": "user", "content": "Tell a long story about a dragon."}],
        "temperature": 0,
        "max_tokens": tokens,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if constrained:
        args["response_format"] = {
            "type": "json_schema",
            "json_schema": {"name": "story", "schema": _obj({"story": {"type": "string"}})},
        }
    first = last = 0.0
    count = 0
    stream: Any = client.chat.completions.create(**args)
    for chunk in stream:
        if chunk.usage:
            count = chunk.usage.completion_tokens
        elif chunk.choices and chunk.choices[0].delta.content:
            last = time.perf_counter()
            first = first or last
    return (count - 1) / (last - first)


def main() -> None:
    args = bench_arguments(__doc__, "update this markdown file's structured-output section", tokens=96)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="mlx-bench-") as tmp, running_server(Path(tmp)) as url:
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="x", timeout=600, max_retries=0)
        plain, streamed, schemas = run_schemas(client)
        print(f"schemas: {plain}/{schemas} non-stream, {streamed}/{schemas} stream")
        objects, subjects = run_json_object(client)
        print(f"json_object: {objects}/{subjects}")
        tool_rows = []
        for label, tools, choice in [
            ("required, 1 tool", [TOOL_WEATHER], "required"),
            ("required, 3 tools", [TOOL_WEATHER, TOOL_TIME, TOOL_CONVERT], "required"),
            (
                "named (get_time of 3)",
                [TOOL_WEATHER, TOOL_TIME, TOOL_CONVERT],
                {"type": "function", "function": {"name": "get_time"}},
            ),
        ]:
            ok, same, total = run_tools(client, tools, choice)
            tool_rows.append((label, ok, same, total))
            print(f"{label}: {ok}/{total} valid, {same}/{total} stream == non-stream")
        speeds = {c: [decode_speed(client, c, args.tokens) for _ in range(3)] for c in (False, True)}
    free, bound = statistics.median(speeds[False]), statistics.median(speeds[True])
    lines = [
        f"Run {datetime.now(UTC):%Y-%m-%d %H:%M} UTC, model {MODEL}, in {time.monotonic() - started:.0f} s.",
        "",
        "| check | result |",
        "|---|---|",
        f"| 20 JSON Schemas, non-stream (temperature 0) | {plain}/{schemas} valid |",
        f"| 20 JSON Schemas, stream (temperature 0.7) | {streamed}/{schemas} valid |",
        f"| json_object | {objects}/{subjects} parse as objects |",
        *[
            f"| tool_choice {label} | {ok}/{total} schema-valid calls, {same}/{total} streamed = non-stream |"
            for label, ok, same, total in tool_rows
        ],
        "",
        f"Decode speed, {args.tokens} tokens, medians of 3: unconstrained {free:.2f} tokens/s, under a JSON "
        f"Schema {bound:.2f} tokens/s: **{bound / free:.1%}** "
        f"({'meets' if bound / free >= 0.9 else 'misses'} the 90 % target).",
    ]
    section = "\n".join(lines)
    publish(section, args.write, "Structured output and forced tool calls", START, END)


if __name__ == "__main__":
    main()
