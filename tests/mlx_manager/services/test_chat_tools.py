"""The playground's tools: the calculator, the clock, echo, call checking and the tool editor."""

from __future__ import annotations

import json
import math
import time
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mlx_manager.services.calculator import (
    MAX_EXPRESSION_LENGTH,
    CalculatorError,
    evaluate,
    format_number,
)
from mlx_manager.services.chat_tools import (
    BUILTIN_TOOLS,
    ArgumentError,
    BuiltinTool,
    ToolDefinitionError,
    ToolResult,
    check_arguments,
    execute_tool,
    parse_tool_definitions,
    rejected_call_result,
)


def calculate(expression: str) -> ToolResult:
    return execute_tool("calculator", {"expression": expression})


# --- calculator: correct answers ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("2 + 3 * 4", "14"),
        ("(2 + 3) * 4", "20"),
        ("2 ** 3 ** 2", "512"),
        ("-2 ** 2", "-4"),
        ("(-2) ** 2", "4"),
        ("--3", "3"),
        ("+5 - -5", "10"),
        ("7 // 2", "3"),
        ("-7 // 2", "-4"),
        ("7 % 3", "1"),
        ("7 / 2", "3.5"),
        ("1 / 3", "0.333333333333333"),
        ("0.1 + 0.2", "0.3"),
        ("2 ** -1", "0.5"),
        ("1e3 * 2", "2000"),
        ("2 ** 100", "1267650600228229401496703205376"),
        ("sqrt(16)", "4"),
        ("sqrt(2)", "1.4142135623731"),
        ("pi", "3.14159265358979"),
        ("tau / 2 - pi", "0"),
        ("e", "2.71828182845905"),
        ("sin(pi / 2) + cos(0)", "2"),
        ("atan(1) * 4", "3.14159265358979"),
        ("log(e)", "1"),
        ("log(8, 2)", "3"),
        ("log10(1000)", "3"),
        ("exp(0)", "1"),
        ("floor(-2.5)", "-3"),
        ("ceil(2.1)", "3"),
        ("abs(-7)", "7"),
        ("fabs(-7)", "7"),
        ("round(2.675, 2)", "2.67"),
        ("round(1234, -2)", "1200"),
        ("round(2.5)", "2"),
        ("min(3, 1, 2)", "1"),
        ("max(3, 1.5)", "3"),
        ("max(4)", "4"),
        ("  1 + 1  ", "2"),
        ("-0.0", "0"),
    ],
)
def test_calculator_evaluates_arithmetic(expression: str, expected: str) -> None:
    assert calculate(expression) == ToolResult(expected)


def test_calculator_keeps_integers_exact_and_rounds_floats_to_15_digits() -> None:
    assert evaluate("10 ** 30 + 1") == 10**30 + 1
    assert format_number(10**30 + 1) == "1" + "0" * 29 + "1"
    assert evaluate("0.1 + 0.2") == 0.1 + 0.2
    assert format_number(0.1 + 0.2) == "0.3"
    assert format_number(1e20) == "1e+20"
    assert format_number(2.0) == "2"


small_ints = st.integers(min_value=0, max_value=99).map(str)
arithmetic = st.recursive(
    small_ints,
    lambda inner: st.one_of(
        st.tuples(inner, st.sampled_from(["+", "-", "*"]), inner).map(" ".join),
        inner.map(lambda e: f"({e})"),
        inner.map(lambda e: f"-{e}"),
    ),
    max_leaves=12,
)


@given(arithmetic)
@settings(max_examples=300, deadline=None)
def test_calculator_agrees_with_python_on_integer_arithmetic(expression: str) -> None:
    assert evaluate(expression) == eval(expression)
    assert calculate(expression).content == str(eval(expression))


# --- calculator: refusals ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("__import__('os')", "unknown function '__import__'"),
        ("().__class__", "Attribute is not allowed"),
        ("(1).real", "Attribute is not allowed"),
        ("[1][0]", "Subscript is not allowed"),
        ("'a' * 3", "'a' is not a number"),
        ("lambda: 1", "Lambda is not allowed"),
        ("[x for x in (1, 2)]", "ListComp is not allowed"),
        ("(1, 2)", "Tuple is not allowed"),
        ("True + 1", "True is not a number"),
        ("1j * 2", "1j is not a number"),
        ("1 < 2", "Compare is not allowed"),
        ("1 if 1 else 2", "IfExp is not allowed"),
        ("1 << 2", "operator LShift is not allowed"),
        ("~1", "UnaryOp is not allowed"),
        ("(x := 3)", "NamedExpr is not allowed"),
        ("factorial(5)", "unknown function 'factorial'"),
        ("math.sqrt(4)", "only the listed functions can be called"),
        ("sqrt(x=4)", "sqrt() takes plain positional arguments only"),
        ("max(*(1, 2))", "max() takes plain positional arguments only"),
        ("sqrt(1, 2)", "sqrt() takes 1 argument(s), got 2"),
        ("log(1, 2, 3)", "log() takes 1 or 2 argument(s), got 3"),
        ("min()", "min() takes 1 or more argument(s), got 0"),
        ("x + 1", "unknown name 'x'; available constants: pi, e, tau"),
        # Cheap to compute: without the estimate it fails here instead of hanging on 9 ** 9 ** 9.
        ("10 ** 100000", "would have about 1e+05 digits"),
        ("9 ** 9 ** 9", "would have about 3.7e+08 digits"),
        ("2 ** 0.5 ** -3000", "too large"),
        ("10 ** 3000 * 10 ** 3000", "more than 4000 digits"),
        ("1e308 * 10", "too large (overflow)"),
        ("exp(1000)", "too large (overflow)"),
        ("(10 ** 3000) / 3", "too large (overflow)"),
        ("round(5, 10 ** 9)", "round(): digits must be a whole number"),
        ("(-8) ** 0.5", "not a real number"),
        ("1 / 0", "division by zero"),
        ("5 % 0", "division by zero"),
        ("0 ** -1", "division by zero"),
        ("sqrt(-1)", "math domain error"),
        ("log(0)", "math domain error"),
        ("log(8, 1)", "division by zero"),
        ("1 +* 2", "syntax error at column 4: invalid syntax"),
        ("1 +", "syntax error: invalid syntax"),
        ("(1", "'(' was never closed"),
        ("import os", "syntax error"),
        ("", "the expression is empty"),
        ("1\x00", "cannot contain null bytes"),
        ("1" + "+1" * (MAX_EXPRESSION_LENGTH // 2), "longer than 500 characters"),
    ],
)
def test_calculator_refuses_with_a_clear_message(expression: str, message: str) -> None:
    result = calculate(expression)
    assert result.is_error
    assert result.content.startswith("Error: ")
    assert message in result.content


def test_calculator_refusals_are_fast() -> None:
    started = time.perf_counter()
    for expression in ["9**9**9", "10**100000", "(10**3999)**(10**3999)", "2**2**2**2**2**2"]:
        with pytest.raises(CalculatorError):
            evaluate(expression)
    assert time.perf_counter() - started < 1


def test_calculator_survives_deep_nesting() -> None:
    assert evaluate("-" * 400 + "1") == 1
    with pytest.raises(CalculatorError):
        evaluate("(" * 240 + "1" + ")" * 240)


# --- current_time and echo ---------------------------------------------------------------------


def _parse_time(content: str) -> tuple[datetime, str]:
    stamp, rest = content.split(" ", 1)
    return datetime.fromisoformat(stamp), rest


def test_current_time_defaults_to_utc() -> None:
    before = datetime.now(UTC).replace(microsecond=0)
    result = execute_tool("current_time", "{}")
    moment, rest = _parse_time(result.content)
    assert not result.is_error
    assert moment.utcoffset() == timedelta(0)
    assert before <= moment <= datetime.now(UTC)
    assert rest == f"({moment:%A}, UTC)"


def test_current_time_in_a_named_zone() -> None:
    result = execute_tool("current_time", '{"timezone": "Asia/Kolkata"}')
    moment, rest = _parse_time(result.content)
    assert moment.utcoffset() == timedelta(hours=5, minutes=30)
    assert abs(moment - datetime.now(ZoneInfo("Asia/Kolkata"))) < timedelta(seconds=5)
    assert rest == f"({moment:%A}, Asia/Kolkata)"
    assert moment.strftime("%A") in {
        "Monday",
        "Tuesday",
        "Wednesday",
        "Thursday",
        "Friday",
        "Saturday",
        "Sunday",
    }


@pytest.mark.parametrize(
    "zone", ["Mars/Olympus_Mons", "europe/paris", "../../etc/passwd", "/etc/localtime", ""]
)
def test_current_time_rejects_unknown_zone_with_an_example(zone: str) -> None:
    result = execute_tool("current_time", {"timezone": zone})
    assert result.is_error
    assert f"unknown time zone {zone!r}" in result.content
    assert "'Europe/Paris'" in result.content


def test_echo_returns_text_unchanged() -> None:
    text = '  spaces, "quotes", ünïcode\nand a newline  '
    assert execute_tool("echo", {"text": text}) == ToolResult(text)
    assert execute_tool("echo", json.dumps({"text": ""})) == ToolResult("")


# --- execute_tool and rejected calls -----------------------------------------------------------


def test_builtin_definitions_are_openai_tools_with_valid_schemas() -> None:
    assert list(BUILTIN_TOOLS) == ["calculator", "current_time", "echo"]
    definitions = [tool.definition for tool in BUILTIN_TOOLS.values()]
    assert parse_tool_definitions(json.dumps(definitions)) == definitions
    parameters = {name: tool.definition["function"]["parameters"] for name, tool in BUILTIN_TOOLS.items()}
    assert parameters["calculator"]["required"] == ["expression"]
    assert parameters["current_time"]["required"] == []
    assert parameters["echo"]["properties"] == {
        "text": {"type": "string", "description": "The text to return"}
    }


@pytest.mark.parametrize("arguments", ['{"expression": "1+",', "{'expression': '1'}", "not json at all"])
def test_execute_tool_feeds_back_bad_json(arguments: str) -> None:
    result = execute_tool("calculator", arguments)
    assert result.is_error
    assert "the arguments are not valid JSON" in result.content
    assert "at line 1, column" in result.content
    assert f"You sent: {arguments}" in result.content
    assert "Call calculator again" in result.content


@pytest.mark.parametrize(
    ("arguments", "problem"),
    [
        ({"expression": 4}, "expression: 4 is not of type 'string'"),
        ({}, "'expression' is a required property"),
        ("", "'expression' is a required property"),
        ({"expression": "1", "precision": 3}, "('precision' was unexpected)"),
        ("[1, 2]", "the arguments must be a JSON object, not list"),
        ('{"expression": NaN}', "NaN is not valid JSON"),
        ("[" * 100_000, "the arguments are not valid JSON"),
    ],
)
def test_execute_tool_names_the_schema_problem(arguments: str | dict[str, Any], problem: str) -> None:
    result = execute_tool("calculator", arguments)
    assert result.is_error
    assert result.content.startswith("Error: the call to calculator was not run: ")
    assert problem in result.content


def test_execute_tool_lists_available_tools_for_unknown_name() -> None:
    result = execute_tool("web_search", {"query": "x"})
    assert result == ToolResult(
        "Error: unknown tool 'web_search'. Available tools: calculator, current_time, echo.", is_error=True
    )


def test_execute_tool_turns_an_implementation_crash_into_an_error_result(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def crash(arguments: dict[str, Any]) -> ToolResult:
        raise RuntimeError("disk on fire")

    monkeypatch.setitem(BUILTIN_TOOLS, "echo", BuiltinTool(BUILTIN_TOOLS["echo"].definition, crash))
    assert execute_tool("echo", {"text": "hi"}) == ToolResult(
        "Error: echo failed (RuntimeError: disk on fire)", True
    )


def test_rejected_call_result_is_short_and_says_what_to_do() -> None:
    text = rejected_call_result("get_weather", '{"city": 5}', "city: 5 is not of type 'string'.")
    assert text == (
        "Error: the call to get_weather was not run: city: 5 is not of type 'string'. "
        'You sent: {"city": 5}\n'
        "Call get_weather again with arguments that are a JSON object matching its parameters."
    )
    long = rejected_call_result("echo", "x" * 5000, "too long")
    assert len(long) < 400
    assert "x" * 200 + "…" in long


def test_check_arguments_validates_user_tools_with_their_own_dialect() -> None:
    parameters = {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "type": "object",
        "definitions": {"day": {"type": "integer", "minimum": 1}},
        "properties": {"days": {"type": "array", "items": {"$ref": "#/definitions/day"}}},
    }
    assert check_arguments(parameters, '{"days": [1, 2]}') == {"days": [1, 2]}
    with pytest.raises(ArgumentError, match=r"^days\[1\]: 0 is less than the minimum of 1$"):
        check_arguments(parameters, {"days": [1, 0]})


# --- the tool editor ---------------------------------------------------------------------------

WEATHER = {
    "name": "get_weather",
    "description": "Weather forecast",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
        "required": ["city"],
    },
}


def test_parse_accepts_openai_and_bare_forms_and_normalizes() -> None:
    text = json.dumps([{"type": "function", "function": WEATHER}, {"name": "ping"}])
    assert parse_tool_definitions(text) == [
        {"type": "function", "function": WEATHER},
        {
            "type": "function",
            "function": {"name": "ping", "parameters": {"type": "object", "properties": {}}},
        },
    ]


def test_parse_accepts_a_single_definition_and_empty_text() -> None:
    assert parse_tool_definitions(json.dumps(WEATHER)) == [{"type": "function", "function": WEATHER}]
    assert parse_tool_definitions("  \n") == []
    assert parse_tool_definitions("[]") == []


def test_parse_accepts_a_builtin_definition_pasted_unchanged() -> None:
    calculator = BUILTIN_TOOLS["calculator"].definition
    assert parse_tool_definitions(json.dumps([calculator, WEATHER]))[0] == calculator


def with_parameters(parameters: Any, name: str = "get_weather") -> str:
    return json.dumps([{"name": "ping"}, {"name": name, "parameters": parameters}])


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            '[\n  {"name": "a",}\n]',
            "invalid JSON: Expecting property name enclosed in double quotes at line 2, column 16",
        ),
        ('[{"name": "a", "parameters": {"type": "object", "maximum": NaN}}]', "invalid JSON: NaN"),
        ("[" * 20_000 + "]" * 20_000, "invalid JSON"),
        ('["get_weather"]', "tool 1: must be a JSON object"),
        ('[{"description": "no name"}]', "tool 1: name None must be 1-64 letters, digits, _ or -"),
        ('[{"name": "get weather"}]', "tool 1 (get weather): name 'get weather' must be 1-64"),
        (json.dumps([{"name": "x" * 65}]), "must be 1-64 letters"),
        ('[{"name": "a", "description": 3}]', "tool 1 (a): description must be a string"),
        ('[{"name": "a", "paramters": {}}]', "tool 1 (a): unexpected keys ['paramters']"),
        ('[{"type": "tool", "function": {"name": "a"}}]', 'tool 1 (a): use {"type": "function"'),
        ('[{"function": "a"}]', "tool 1: use {"),
        ('[{"type": "function", "function": {"name": "a"}, "id": 1}]', "unexpected keys ['id']"),
        ('[{"name": "a", "strict": "yes"}]', "tool 1 (a): strict must be true or false"),
        (
            with_parameters({"type": "object", "properties": {"days": {"type": "integr"}}}),
            "tool 2 (get_weather): parameters.properties.days.type: "
            "'integr' is not valid under any of the given schemas",
        ),
        (
            with_parameters({"type": "object", "required": "city"}),
            "tool 2 (get_weather): parameters.required: 'city' is not of type 'array'",
        ),
        (
            with_parameters({"type": "object", "properties": {"d": {"enum": [1], "minimum": "1"}}}),
            "parameters.properties.d.minimum: '1' is not of type 'number'",
        ),
        (with_parameters({"type": "string"}), 'tool 2 (get_weather): parameters.type must be "object"'),
        (with_parameters({"properties": {}}), 'parameters.type must be "object"'),
        (with_parameters("object"), "tool 2 (get_weather): parameters must be a JSON Schema object"),
        (
            with_parameters({"$schema": "https://example.com/my-dialect", "type": "object"}),
            "parameters.$schema: unknown dialect 'https://example.com/my-dialect'; omit it",
        ),
        (
            with_parameters({"type": "object", "properties": {"c": {"$ref": "https://example.com/c.json"}}}),
            "parameters.properties.c.$ref: 'https://example.com/c.json' does not point inside this schema",
        ),
        (
            with_parameters({"type": "object", "properties": {"c": {"$ref": "#/$defs/city"}}}),
            "parameters.properties.c.$ref: '#/$defs/city' does not point inside this schema",
        ),
        (
            json.dumps([WEATHER, {"name": "ping"}, {**WEATHER, "description": "again"}]),
            "tool 3 (get_weather): the name is already used by tool 1; rename one",
        ),
        (
            json.dumps([{"name": "calculator", "parameters": {"type": "object"}}]),
            "tool 1 (calculator): calculator is a built-in tool; rename yours",
        ),
        (json.dumps([{"name": "a", "description": "x" * 70_000}]), "larger than 64 KiB"),
    ],
)
def test_parse_tool_definitions_says_what_to_fix_and_where(text: str, message: str) -> None:
    with pytest.raises(ToolDefinitionError) as caught:
        parse_tool_definitions(text)
    assert message in str(caught.value)


def test_parse_accepts_local_references() -> None:
    parameters = {
        "type": "object",
        "$defs": {"city": {"type": "string", "minLength": 1}},
        "properties": {"from": {"$ref": "#/$defs/city"}, "to": {"$ref": "#/$defs/city"}},
    }
    [tool] = parse_tool_definitions(with_parameters(parameters))[1:]
    assert check_arguments(tool["function"]["parameters"], {"from": "Oslo", "to": "Rome"}) == {
        "from": "Oslo",
        "to": "Rome",
    }
    with pytest.raises(ArgumentError, match=r"^to: '' should be non-empty$"):
        check_arguments(tool["function"]["parameters"], {"from": "Oslo", "to": ""})


def test_math_constants_match_the_math_module() -> None:
    assert evaluate("pi") == math.pi
    assert evaluate("e") == math.e
    assert evaluate("tau") == math.tau
