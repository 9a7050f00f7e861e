"""response_format parsing, schema errors, output checks, and special-token markers in grammars."""

from __future__ import annotations

from typing import Any

import pytest

from mlx_server.errors import APIError
from mlx_server.services.pipeline.engine.constraints import MAX_SCHEMA_BYTES, specialize
from mlx_server.services.pipeline.structured_output import output_problem, parse_response_format

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"n": {"type": "integer", "minimum": 1}},
    "required": ["n"],
    "additionalProperties": False,
}


def _format(schema: Any) -> dict[str, Any]:
    return {"type": "json_schema", "json_schema": {"name": "x", "schema": schema, "strict": True}}


def test_text_and_no_format_are_unconstrained() -> None:
    assert parse_response_format(None) is None
    assert parse_response_format({"type": "text"}) is None


def test_json_object_and_json_schema_compile() -> None:
    json_object = parse_response_format({"type": "json_object"})
    assert json_object is not None and json_object.schema == {"type": "object"}
    schema = parse_response_format(_format(SCHEMA))
    assert schema is not None and schema.schema == SCHEMA and schema.grammar


@pytest.mark.parametrize(
    ("response_format", "param", "says"),
    [
        ({"type": "yaml"}, "response_format.type", "'yaml'"),
        ({"type": "json_schema"}, "response_format.json_schema.schema", "must be a JSON Schema object"),
        (
            _format({"type": "integer", "minimum": "one"}),
            "response_format.json_schema.schema",
            "not valid JSON Schema",
        ),
        (
            _format({"type": "string", "description": "x" * MAX_SCHEMA_BYTES}),
            "response_format.json_schema.schema",
            "bytes",
        ),
    ],
)
def test_bad_formats_are_400_naming_the_parameter(
    response_format: dict[str, Any], param: str, says: str
) -> None:
    with pytest.raises(APIError) as caught:
        parse_response_format(response_format)
    assert caught.value.status == 400 and caught.value.param == param
    assert says in caught.value.message


def test_output_problems_are_reported_in_words() -> None:
    output_format = parse_response_format(_format(SCHEMA))
    assert output_format is not None
    assert output_problem('{"n": 3}', output_format) is None
    truncated = output_problem('{"n": ', output_format)
    assert truncated is not None and "not complete JSON" in truncated
    wrong = output_problem('{"n": 0}', output_format)
    assert wrong is not None and "at n" in wrong and "minimum" in wrong


def test_special_token_markers_become_token_matches_outside_json() -> None:
    grammar = (
        'start: call\ncall: "<tool_call>\\n" body "\\n</tool_call>"\nbody: %json {"const": "<tool_call>"}'
    )
    specialized = specialize(grammar, {"<tool_call>": 151657, "</tool_call>": 151658})
    assert specialized == (
        'start: call\ncall: <[151657]> "\\n" body "\\n" <[151658]>\nbody: %json {"const": "<tool_call>"}'
    )
    assert specialize(grammar, {}) == grammar
