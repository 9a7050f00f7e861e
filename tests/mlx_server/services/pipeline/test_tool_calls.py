"""Tool calls checked against the declared tools: names, schema types, repeats."""

from __future__ import annotations

import json

from mlx_server.parsers.base import make_tool_call
from mlx_server.services.pipeline.protocols.openai_request import chat_tools
from mlx_server.services.pipeline.tool_calls import ToolCallChecker
from tests.mlx_server.parsers.grammar_support import function_tool

TOOLS = chat_tools(
    [
        function_tool(
            "get_weather",
            {
                "city": {"type": "string"},
                "days": {"type": "integer"},
                "metric": {"type": "boolean"},
                "ratio": {"type": "number"},
                "tags": {"type": "array", "items": {"type": "integer"}},
                "where": {"type": "object", "properties": {"lat": {"type": "number"}}},
            },
            ["city"],
            closed=False,
        ),
        {"type": "function", "function": {"name": "no_params"}},
    ]
)


def _args(checker: ToolCallChecker, name: str, arguments: object) -> object:
    call = checker.check(make_tool_call(name, arguments))
    assert call is not None
    return json.loads(call.function.arguments)


def test_arguments_are_coerced_to_the_schema_types() -> None:
    checker = ToolCallChecker(TOOLS)
    raw = {
        "city": 75008,
        "days": "5",
        "metric": "True",
        "ratio": "0.5",
        "tags": ["1", 2],
        "where": '{"lat": "48.85"}',
    }
    assert _args(checker, "get_weather", raw) == {
        "city": "75008",
        "days": 5,
        "metric": True,
        "ratio": 0.5,
        "tags": [1, 2],
        "where": {"lat": 48.85},
    }


def test_values_that_cannot_be_coerced_are_left_as_written() -> None:
    checker = ToolCallChecker(TOOLS)
    assert _args(checker, "get_weather", {"city": "Paris", "days": "five"}) == {
        "city": "Paris",
        "days": "five",
    }


def test_undeclared_tools_are_not_tool_calls_and_the_reason_is_kept() -> None:
    checker = ToolCallChecker(TOOLS)
    assert checker.check(make_tool_call("rm_rf", {"path": "/"})) is None
    assert checker.rejected == ["'rm_rf' is not a declared tool"]
    assert ToolCallChecker(None).check(make_tool_call("get_weather", {"city": "Paris"})) is None


def test_identical_repeats_are_dropped_but_different_arguments_are_kept() -> None:
    checker = ToolCallChecker(TOOLS)
    assert checker.check(make_tool_call("get_weather", {"city": "Paris", "days": 1})) is not None
    assert checker.check(make_tool_call("get_weather", {"days": "1", "city": "Paris"})) is None
    assert checker.check(make_tool_call("get_weather", {"city": "Lyon"})) is not None


def test_a_tool_without_parameters_takes_empty_arguments() -> None:
    assert _args(ToolCallChecker(TOOLS), "no_params", {}) == {}


def test_type_names_json_schema_does_not_know_are_read_leniently() -> None:
    # Clients send {"type": "float"}; jsonschema raised UnknownType out of the turn for it.
    properties = {
        "factor": {"type": "float"},
        "steps": {"type": ["int64", "null"]},
        "unit": {"type": "str", "enum": [{"type": "float"}, "cm"]},
    }
    tools = chat_tools([function_tool("scale", properties, closed=False)])
    checker = ToolCallChecker(tools, strict=True)
    arguments = {"factor": "1.5", "steps": "3", "unit": "cm"}
    assert _args(checker, "scale", arguments) == {"factor": 1.5, "steps": 3, "unit": "cm"}
    # A float-like name is a number: text that is not one breaks the schema (strict drops it).
    assert checker.check(make_tool_call("scale", {"factor": "big"})) is None
    assert "is not of type 'number'" in checker.rejected[-1]
    # Any other unknown name is unchecked, and data inside enum keeps its "type" key.
    assert checker.schemas["scale"]["properties"]["unit"] == {"enum": [{"type": "float"}, "cm"]}
