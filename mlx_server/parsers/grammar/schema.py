"""Reading a tool's JSON Schema for a grammar: which keywords constrain a value, references
inlined, counts and number bounds checked; `Unsupported` for what a native grammar cannot write."""

from __future__ import annotations

from collections.abc import Set as AbstractSet
from typing import Any
from urllib.parse import unquote

from mlx_server.parsers.grammar.blocks import each_subschema


class Unsupported(Exception):
    """A schema feature a native value grammar does not express."""


# Keywords that constrain a value (JSON Schema 2020-12, with draft-7's); any other is an annotation.
VALIDATION_KEYS = frozenset(
    {
        "type", "enum", "const", "multipleOf", "maximum", "exclusiveMaximum", "minimum",
        "exclusiveMinimum", "maxLength", "minLength", "pattern", "format", "maxItems", "minItems",
        "uniqueItems", "maxContains", "minContains", "contains", "prefixItems", "items",
        "additionalItems", "unevaluatedItems", "maxProperties", "minProperties", "required",
        "dependentRequired", "dependentSchemas", "dependencies", "properties", "patternProperties",
        "additionalProperties", "propertyNames", "unevaluatedProperties", "allOf", "anyOf", "oneOf",
        "not", "if", "then", "else", "$ref", "$dynamicRef", "$recursiveRef",
    }
)  # fmt: skip
STRING_KEYS = frozenset({"minLength", "maxLength", "pattern", "format"})
NUMBER_KEYS = frozenset({"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"})
TYPE_KEYS: dict[str, frozenset[str]] = {
    "object": frozenset({"properties", "required", "additionalProperties"}),
    "array": frozenset({"items", "minItems", "maxItems", "uniqueItems"}),
    "string": STRING_KEYS,
    "number": NUMBER_KEYS,
    "integer": NUMBER_KEYS,
    "boolean": frozenset(),
    "null": frozenset(),
}
ALL_TYPE_KEYS = frozenset().union(*TYPE_KEYS.values())
# What an object of named parameters may say: the keywords both builders write parameters from.
OBJECT_KEYWORDS = frozenset({"type", *TYPE_KEYS["object"]})
# Past this many items, a bounded array is not spelled out as repetitions.
MAX_REPEAT = 64
# A float without bounds gets these: larger magnitudes (1e400) would read back as infinity.
NUMBER_LIMIT = 1e15
# How many schema nodes inlining references may visit (a reference bomb is Unsupported).
_REF_BUDGET = 2000


def _pointer(root: Any, ref: str) -> Any:
    if ref == "#":
        return root
    if not ref.startswith("#/"):
        raise Unsupported(f"$ref {ref!r} is not a local JSON pointer")
    node = root
    for raw in ref[2:].split("/"):
        part = unquote(raw).replace("~1", "/").replace("~0", "~")
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            raise Unsupported(f"$ref {ref!r} points nowhere")
    return node


def inline_refs(schema: dict[str, Any]) -> dict[str, Any]:
    """`schema` with every local `$ref` replaced by its target and `$defs` dropped; Unsupported
    for a recursive or remote reference, or one beside other keywords."""
    budget = [_REF_BUDGET]

    def resolve(node: Any, seen: frozenset[str]) -> Any:
        budget[0] -= 1
        if budget[0] < 0:
            raise Unsupported("the schema is too large once its references are expanded")
        if not isinstance(node, dict):
            return node
        ref = node.get("$ref")
        if ref is not None:
            if not isinstance(ref, str) or ref in seen:
                raise Unsupported("a recursive $ref")
            if (node.keys() - {"$ref"}) & VALIDATION_KEYS:
                raise Unsupported("$ref beside other keywords")
            return resolve(_pointer(schema, ref), seen | {ref})
        kept = {key: value for key, value in node.items() if key not in ("$defs", "definitions")}
        return each_subschema(kept, lambda item: resolve(item, seen))

    resolved: dict[str, Any] = resolve(schema, frozenset({"#"}))
    return resolved


def json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object"


def _kinds(schema: Any) -> set[str] | None:
    """The JSON types a schema's values can have, when it says (integer counted as number)."""
    if not isinstance(schema, dict):
        return None
    if "const" in schema or "enum" in schema:
        values = [schema["const"]] if "const" in schema else schema["enum"]
        kinds = {json_type(value) for value in values} if isinstance(values, list) else None
    else:
        declared = schema.get("type")
        kinds = set(declared if isinstance(declared, list) else [declared]) if declared else None
    return None if kinds is None else {"number" if kind == "integer" else kind for kind in kinds}


def disjoint(options: list[Any]) -> bool:
    """Whether no value can match two of `options` (told apart by type), so oneOf is anyOf."""
    seen: set[str] = set()
    for option in options:
        kinds = _kinds(option)
        if kinds is None or kinds & seen:
            return False
        seen |= kinds
    return True


def schema_count(schema: dict[str, Any], key: str) -> int | None:
    value = schema.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or value != int(value) or value < 0:
        raise Unsupported(f"{key} is not a count")
    return int(value)


def bounded_number(schema: dict[str, Any]) -> dict[str, Any]:
    """A number schema with a bound on each side (NUMBER_LIMIT where it has none)."""
    bounds = {key: schema[key] for key in NUMBER_KEYS if key in schema}
    if any(isinstance(value, bool) or not isinstance(value, int | float) for value in bounds.values()):
        raise Unsupported("a non-numeric bound")
    if "minimum" not in bounds and "exclusiveMinimum" not in bounds:
        bounds["minimum"] = -NUMBER_LIMIT
    if "maximum" not in bounds and "exclusiveMaximum" not in bounds:
        bounds["maximum"] = NUMBER_LIMIT
    return {"type": "number", **bounds}


def constrains_only(schema: dict[str, Any], keywords: AbstractSet[str]) -> bool:
    """Whether every keyword of `schema` that constrains a value is one of `keywords`
    (annotations and keywords JSON Schema does not define say nothing about the value)."""
    return schema.keys() & VALIDATION_KEYS <= keywords


def parameters_object(schema: dict[str, Any]) -> dict[str, Any]:
    """A tool's parameters schema with its references inlined; Unsupported unless it is an
    object described by properties, required and additionalProperties alone."""
    resolved = inline_refs(schema)
    if not constrains_only(resolved, OBJECT_KEYWORDS) or resolved.get("type", "object") != "object":
        raise Unsupported("parameters that are not an object of declared properties")
    return resolved
