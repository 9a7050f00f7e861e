"""Building blocks for the grammars parsers give constrained decoding (llguidance's Lark dialect).

A parser's `call_grammar(tools, parallel=...)` describes a reply that is nothing but calls to
the given tools, written in its format, with each call's arguments matching that tool's
`parameters` schema; `%json {...}` embeds a JSON Schema in a Lark rule.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

# Compact, deterministic JSON inside calls: fewer tokens, and what the parsers expect.
_COMPACT = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "}


def tool_name(tool: dict[str, Any]) -> str:
    function = tool.get("function") or {}
    return str(function.get("name", ""))


def parameters_schema(tool: dict[str, Any]) -> dict[str, Any]:
    """A tool's arguments schema; tools without one take any object."""
    parameters = (tool.get("function") or {}).get("parameters")
    schema = dict(parameters) if isinstance(parameters, dict) and parameters else {"type": "object"}
    schema.setdefault("type", "object")
    return schema


def json_rule(schema: dict[str, Any]) -> str:
    """`%json {...}`: a JSON value matching `schema`, written compactly."""
    return "%json " + json.dumps({**schema, "x-guidance": _COMPACT}, ensure_ascii=False)


def literal(text: str) -> str:
    """A Lark string literal for `text`."""
    return json.dumps(text, ensure_ascii=False)


_SUBSCHEMA = ("items", "additionalProperties", "not", "if", "then", "else", "contains", "propertyNames",
              "additionalItems", "unevaluatedItems", "unevaluatedProperties")  # fmt: skip
_SUBSCHEMA_LISTS = ("allOf", "anyOf", "oneOf", "prefixItems")
_SUBSCHEMA_MAPS = (
    "properties",
    "patternProperties",
    "dependentSchemas",
    "dependencies",
    "$defs",
    "definitions",
)


def each_subschema(node: dict[str, Any], change: Callable[[Any], Any]) -> dict[str, Any]:
    """`node` with `change` applied to each of its subschemas."""
    result: dict[str, Any] = {}
    for key, value in node.items():
        if key in _SUBSCHEMA:
            value = [change(item) for item in value] if isinstance(value, list) else change(value)
        elif key in _SUBSCHEMA_LISTS and isinstance(value, list):
            value = [change(item) for item in value]
        elif key in _SUBSCHEMA_MAPS and isinstance(value, dict):
            value = {name: change(item) for name, item in value.items()}
        result[key] = value
    return result


def rebase_refs(schema: Any, base: str) -> Any:
    """`schema` for embedding at JSON pointer `base` of a larger one: its local `$ref`s made to
    point where their targets then are (`#/$defs/X` -> `{base}/$defs/X`)."""
    if not isinstance(schema, dict):
        return schema
    ref = schema.get("$ref")
    if isinstance(ref, str) and ref.startswith("#"):
        schema = {**schema, "$ref": base + ref[1:]}
    return each_subschema(schema, lambda item: rebase_refs(item, base))


def json_call_schema(usable: list[tuple[str, dict[str, Any]]], arguments_key: str) -> dict[str, Any]:
    """{"name": <one of the tools>, arguments_key: <its parameters>} as one JSON Schema, with
    references in the parameters still pointing at their definitions."""
    variants = [
        {
            "type": "object",
            "properties": {
                "name": {"const": name},
                arguments_key: rebase_refs(schema, f"#/anyOf/{index}/properties/{arguments_key}"),
            },
            "required": ["name", arguments_key],
            "additionalProperties": False,
        }
        for index, (name, schema) in enumerate(usable)
    ]
    return {"anyOf": variants}


def call_object_schema(tools: list[dict[str, Any]], arguments_key: str = "arguments") -> dict[str, Any]:
    """{"name": <one of the tools>, "arguments": <that tool's schema>} as one JSON Schema."""
    return json_call_schema([(tool_name(t), parameters_schema(t)) for t in tools], arguments_key)


# Parallel calls are bounded: a small model that loops on calls must still end its turn.
MAX_PARALLEL_CALLS = 8


def repeated(rule: str, *, parallel: bool, separator: str = "\n") -> str:
    """The start rule: one call, or up to MAX_PARALLEL_CALLS when parallel calls are allowed."""
    if parallel:
        return f"start: {rule} ({literal(separator)} {rule}){{0,{MAX_PARALLEL_CALLS - 1}}}"
    return f"start: {rule}"


def calls_rule(parallel: bool) -> str:
    """One `call`, or calls back to back up to MAX_PARALLEL_CALLS when parallel calls are allowed."""
    return f"call{{1,{MAX_PARALLEL_CALLS}}}" if parallel else "call"


def alternatives(options: list[str]) -> str:
    """One of `options` (each once) as a Lark expression."""
    options = list(dict.fromkeys(options))
    return options[0] if len(options) == 1 else "(" + " | ".join(options) + ")"


def grammar_tools(
    tools: list[dict[str, Any]], writable: Callable[[str], bool]
) -> list[tuple[str, dict[str, Any]]]:
    """(name, parameters schema) of each tool whose name the format can write, once per name."""
    found: dict[str, dict[str, Any]] = {}
    for tool in tools:
        name = tool_name(tool)
        if name and writable(name) and name not in found:
            found[name] = parameters_schema(tool)
    return list(found.items())


def arguments_rules(tools: list[dict[str, Any]]) -> list[str]:
    """`args_I`: the arguments of the I-th tool, JSON matching its `parameters` schema."""
    return [f"args_{i}: {json_rule(parameters_schema(tool))}" for i, tool in enumerate(tools)]


def one_of(rule: str, bodies: list[str]) -> list[str]:
    """`rule`: one of `bodies`, each the rule `{rule}_I` of its own."""
    choice = " | ".join(f"{rule}_{i}" for i in range(len(bodies)))
    return [f"{rule}: {choice}", *(f"{rule}_{i}: {body}" for i, body in enumerate(bodies))]


def per_tool(rule: str, tools: list[dict[str, Any]], call: Callable[[str, str], str]) -> list[str]:
    """`rule`: one of the tools' calls, each `call(name literal, arguments rule)` for one tool."""
    return one_of(rule, [call(literal(tool_name(tool)), f"args_{i}") for i, tool in enumerate(tools)])


def sequence(*parts: str) -> str:
    """Lark expressions one after the other, empty ones left out."""
    return " ".join(part for part in parts if part)
