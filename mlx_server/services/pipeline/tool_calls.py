"""Tool calls checked against the request's tools: declared name, schema-typed arguments, no repeats.

Quantized models get details wrong that a schema can settle ("5" for an integer, "true" for a
boolean). Arguments are coerced to the declared types, then validated with jsonschema; a call
naming no declared tool is not a tool call, and an identical repeat (a GLM habit) is dropped.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError

from mlx_server.schemas.openai import FunctionCall, ToolCall
from mlx_server.services.pipeline.request import Tool

logger = logging.getLogger("mlx_server.tools")


def tool_schemas(tools: Sequence[Tool] | None) -> dict[str, dict[str, Any]]:
    """Declared function name -> its parameters schema."""
    return {tool.name: lenient_types(dict(tool.parameters or {})) for tool in tools or ()}


# Type names clients send that JSON Schema does not know ({"type": "float"}), read as a number.
_NUMBER_LIKE = ("float", "double", "decimal", "int", "long", "short", "real", "numeric")
_JSON_TYPES = frozenset({"string", "number", "integer", "boolean", "object", "array", "null"})
# Keywords whose values are data, not schemas: a "type" inside them is left alone.
_DATA_KEYWORDS = frozenset({"enum", "const", "default", "examples"})


def _known_type(name: Any) -> str | None:
    if not isinstance(name, str) or name in _JSON_TYPES:
        return name if isinstance(name, str) else None
    lowered = name.lower()
    return "number" if any(word in lowered for word in _NUMBER_LIKE) else None


def lenient_types(schema: Any) -> Any:
    """`schema` with type names JSON Schema does not know made ones it does (a float- or
    int-like name is a number) or, for any other name, dropped (unchecked): jsonschema raises
    UnknownType for them, and a client's loose schema must not fail the turn."""
    if isinstance(schema, list):
        return [lenient_types(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    result: dict[str, Any] = {}
    for key, value in schema.items():
        if key in _DATA_KEYWORDS:
            result[key] = value
        elif key == "type" and isinstance(value, str | list):
            names = value if isinstance(value, list) else [value]
            known = list(dict.fromkeys(t for t in map(_known_type, names) if t is not None))
            if known:
                result[key] = known if isinstance(value, list) else known[0]
        else:
            result[key] = lenient_types(value)
    return result


def _coerce(value: Any, schema: dict[str, Any]) -> Any:
    kind = schema.get("type")
    kinds = kind if isinstance(kind, list) else [kind]
    if isinstance(value, str):
        text = value.strip()
        if "integer" in kinds:
            try:
                return int(text)
            except ValueError:
                pass
        if "number" in kinds:
            try:
                number = float(text)
                return int(number) if number.is_integer() and "." not in text else number
            except ValueError:
                pass
        if "boolean" in kinds and text.lower() in ("true", "false"):
            return text.lower() == "true"
        if ("object" in kinds or "array" in kinds) and text[:1] in "{[":
            try:
                return _coerce(json.loads(text), schema)
            except ValueError:
                return value
        if "null" in kinds and text.lower() in ("null", "none"):
            return None
    if isinstance(value, dict) and isinstance(schema.get("properties"), dict):
        properties: dict[str, Any] = schema["properties"]
        return {k: _coerce(v, properties.get(k, {})) for k, v in value.items()}
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        return [_coerce(v, schema["items"]) for v in value]
    wants_text = "string" in kinds and "integer" not in kinds and "number" not in kinds
    if wants_text and isinstance(value, int | float) and not isinstance(value, bool):
        return str(value)
    return value


def arguments_fit(arguments: dict[str, Any], schema: dict[str, Any]) -> bool:
    """Whether `arguments`, coerced to the schema's types as calls are, are valid for it."""
    try:
        return not any(Draft202012Validator(schema).iter_errors(_coerce(arguments, schema)))
    except SchemaError:
        return True  # an invalid schema checks nothing (as for calls)


class ToolCallChecker:
    """Per-request: knows the declared tools and the calls already returned."""

    def __init__(self, tools: Sequence[Tool] | None, *, strict: bool = False) -> None:
        """`strict`: drop calls whose arguments break their schema (under a grammar only a call
        cut off by max_tokens can, and it must not pass for a finished one)."""
        self.schemas = tool_schemas(tools)
        self.strict = strict
        self._seen: set[tuple[str, str]] = set()
        self.rejected: list[str] = []
        # The calls behind `rejected`, as written: an agent loop can show the model its mistake.
        self.rejected_calls: list[tuple[ToolCall, str]] = []
        self.repeated = False

    def check(self, call: ToolCall) -> ToolCall | None:
        """The call with coerced arguments, or None (undeclared tool, or a repeat)."""
        name = call.function.name
        if name not in self.schemas:
            self._reject(call, f"{name!r} is not a declared tool")
            return None
        schema = self.schemas[name]
        try:
            arguments = json.loads(call.function.arguments or "{}")
        except ValueError:
            self._reject(call, f"arguments of {name!r} are not JSON")
            return None
        arguments = _coerce(arguments, schema)
        try:
            errors = sorted(Draft202012Validator(schema).iter_errors(arguments), key=lambda e: e.path)
        except SchemaError as exc:
            logger.warning("tool %s has an invalid schema: %s", name, exc.message)
            errors = []
        if errors and self.strict:
            self._reject(call, f"arguments of {name!r} do not match its schema: {errors[0].message}")
            return None
        if errors:
            # Kept: the client's agent loop feeds the problem back to the model, which is better
            # than pretending no call was made; logged for the audit of model quality.
            logger.info("call to %s does not match its schema: %s", name, errors[0].message)
        text = json.dumps(arguments, ensure_ascii=False)
        key = (name, json.dumps(arguments, sort_keys=True, ensure_ascii=False))
        if key in self._seen:
            self.repeated = True
            return None
        self._seen.add(key)
        return ToolCall(id=call.id, function=FunctionCall(name=name, arguments=text))

    def _reject(self, call: ToolCall, reason: str) -> None:
        self.rejected.append(reason)
        self.rejected_calls.append((call, reason))
