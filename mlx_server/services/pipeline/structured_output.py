"""response_format: JSON objects and JSON Schema replies, constrained while generated and checked after.

The grammar makes invalid JSON impossible; the jsonschema check afterwards catches the one way
a reply can still fall short (max_tokens ran out mid-object) and reports it, never silently.
"""

from __future__ import annotations

import json
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError

from mlx_server.errors import APIError
from mlx_server.services.pipeline.engine.constraints import json_schema_grammar
from mlx_server.services.pipeline.request import OutputFormat

SCHEMA_PARAM = "response_format.json_schema.schema"


def parse_response_format(response_format: dict[str, Any] | None) -> OutputFormat | None:
    """OpenAI's response_format as a compiled grammar (None for plain text)."""
    if response_format is None:
        return None
    kind = response_format.get("type", "text")
    if kind == "text":
        return None
    if kind == "json_object":
        schema: dict[str, Any] = {"type": "object"}
        return OutputFormat(kind, schema, json_schema_grammar(schema, "response_format"), "response_format")
    if kind != "json_schema":
        raise APIError(
            400,
            f"response_format type {kind!r} is not one of 'text', 'json_object', 'json_schema'.",
            param="response_format.type",
        )
    spec = response_format.get("json_schema")
    given = spec.get("schema") if isinstance(spec, dict) else None
    if not isinstance(given, dict):
        message = "response_format.json_schema.schema must be a JSON Schema object."
        raise APIError(400, message, param=SCHEMA_PARAM)
    schema = given
    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError as exc:
        message = f"The schema is not valid JSON Schema: {exc.message}."
        raise APIError(400, message, param=SCHEMA_PARAM) from None
    return OutputFormat(kind, schema, json_schema_grammar(schema, SCHEMA_PARAM), SCHEMA_PARAM)


def output_problem(text: str, output_format: OutputFormat) -> str | None:
    """Why `text` is not a valid reply for the format, or None if it is."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        return f"the reply is not complete JSON ({exc.msg} at character {exc.pos})"
    errors = list(Draft202012Validator(output_format.schema).iter_errors(value))
    if errors:
        where = "/".join(str(p) for p in errors[0].absolute_path) or "the top level"
        return f"the reply does not match the schema at {where}: {errors[0].message}"
    return None
