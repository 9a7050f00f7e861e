"""Argument values in a syntax other than JSON, built from JSON Schemas keyword by keyword.

The pythonic and Gemma formats write arguments in a syntax of their own, so ValueGrammar builds
a rule for each value from its schema: the keywords it knows are expressed exactly (numbers and
strings through `%json` where the text is the same); anything else is left to the format's
fallback. PythonValues is the Python-literal dialect (Gemma's is in gemma.py).
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import suppress
from typing import Any

from mlx_server.parsers.grammar.blocks import alternatives, json_rule, literal
from mlx_server.parsers.grammar.schema import (
    ALL_TYPE_KEYS,
    MAX_REPEAT,
    NUMBER_KEYS,
    STRING_KEYS,
    TYPE_KEYS,
    VALIDATION_KEYS,
    Unsupported,
    bounded_number,
    disjoint,
    json_type,
    parameters_object,
    schema_count,
)
from mlx_server.parsers.lenient_json import dump_json
from mlx_server.parsers.python_calls import is_keyword_name, python_literal


class ValueGrammar:
    """Lark rules for argument values in a syntax other than JSON, built from JSON Schemas.

    A dialect sets how literals, strings, object members and open-ended values are written;
    `fallback` decides what happens to a schema it cannot express (raise Unsupported, or a
    JSON-valued rule the parser also reads). Objects write only their declared properties, in
    declared order, the required ones always; `anyOf` becomes alternatives, and so does `oneOf`
    when its options are told apart by type (llguidance refuses other oneOfs too).
    """

    true = "true"
    false = "false"
    null = "null"
    separator = ","

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self.rules: list[str] = []
        # Rules and terminals defined once per grammar (kept when a tool is given up on).
        self.shared: dict[str, str] = {}

    # --- what a dialect defines ---

    def string(self, schema: dict[str, Any]) -> str:
        """A string value with `schema`'s string keywords."""
        raise NotImplementedError

    def render(self, value: Any) -> str:
        """The Lark expression for one literal value (an enum member or const)."""
        raise NotImplementedError

    def member(self, key: str) -> str:
        """What precedes the value of object member `key`."""
        raise NotImplementedError

    def any_key(self) -> str:
        """Any object key, with what separates it from its value."""
        raise NotImplementedError

    def any_value(self) -> str:
        """Any JSON value, written in this syntax (floats bounded, see NUMBER_LIMIT)."""
        name = f"{self.prefix}any"
        if name not in self.shared:
            self.shared[name] = ""  # taken, for the recursion below
            sep = literal(self.separator)
            member = f"{self.any_key()} {name}"
            options = [
                self.string({"type": "string"}),
                json_rule(bounded_number({})),
                literal(self.true),
                literal(self.false),
                literal(self.null),
                f'"{{" ({member} ({sep} {member})*)? "}}"',
                f'"[" ({name} ({sep} {name})*)? "]"',
            ]
            self.shared[name] = f"{name}: " + " | ".join(options)
        return name

    def open_members(self, extra: Any) -> str:
        """Members of an object without declared properties, each following `extra` (a schema,
        or True for any value)."""
        value = self.any_value() if extra is True else self.value(extra)
        member = self.rule(f"{self.any_key()} {value}")
        return f"({member} ({literal(self.separator)} {member})*)?"

    def open_object(self, extra: Any) -> str:
        return f'"{{" {self.open_members(extra)} "}}"'

    def fallback(self, schema: Any, reason: Unsupported) -> str:
        raise reason

    # --- the grammar ---

    def lines(self) -> list[str]:
        return self.rules + list(self.shared.values())

    def rule(self, body: str) -> str:
        name = f"{self.prefix}{len(self.rules)}"
        self.rules.append(f"{name}: {body}")
        return name

    def checkpoint(self) -> int:
        return len(self.rules)

    def rollback(self, mark: int) -> None:
        """Forget the rules made since `mark` (a tool given up on)."""
        del self.rules[mark:]

    def value(self, schema: Any) -> str:
        try:
            return self.native(schema)
        except Unsupported as reason:
            return self.fallback(schema, reason)

    def native(self, schema: Any) -> str:
        if schema is True:
            return self.any_value()
        if not isinstance(schema, dict):
            raise Unsupported("a schema that allows nothing")
        keys = schema.keys() & VALIDATION_KEYS
        if "const" in keys or "enum" in keys:
            return self._literals(schema, keys)
        if keys == {"allOf"} and isinstance(schema["allOf"], list) and len(schema["allOf"]) == 1:
            return self.value(schema["allOf"][0])  # how some generators wrap a $ref
        for combinator in ("anyOf", "oneOf"):
            if combinator in keys:
                options = schema[combinator]
                if keys != {combinator} or not isinstance(options, list) or not options:
                    raise Unsupported(f"{combinator} beside other keywords")
                if combinator == "oneOf" and not disjoint(options):
                    raise Unsupported("oneOf whose options may overlap")  # as llguidance refuses it
                return alternatives([self.value(option) for option in options])
        unknown = keys - ALL_TYPE_KEYS - {"type"}
        if unknown:
            raise Unsupported(f"keywords {sorted(unknown)}")
        types = self._types(schema)
        if types is None:
            # Untyped: each keyword constrains its own type; writing only those types is a subset.
            types = [name for name in ("object", "array", "string", "number") if keys & TYPE_KEYS[name]]
            if not types:
                return self.any_value()
        return alternatives([self._typed(name, schema) for name in types])

    @staticmethod
    def _types(schema: dict[str, Any]) -> list[str] | None:
        declared = schema.get("type")
        if declared is None:
            return None
        names = declared if isinstance(declared, list) else [declared]
        if not names or any(name not in TYPE_KEYS for name in names):
            raise Unsupported(f"type {declared!r}")
        return list(dict.fromkeys(names))

    def _literals(self, schema: dict[str, Any], keys: set[str]) -> str:
        if keys - {"const", "enum", "type"} or {"const", "enum"} <= keys:
            raise Unsupported("enum or const beside other keywords")
        values = [schema["const"]] if "const" in schema else schema["enum"]
        if not isinstance(values, list):
            raise Unsupported("enum is not a list")
        types = self._types(schema)
        rendered = []
        for value in values:
            kind = json_type(value)
            if types is None or kind in types or (kind == "integer" and "number" in types):
                with suppress(Unsupported):
                    rendered.append(self.render(value))
        if not rendered:
            raise Unsupported("no enum value can be written")
        return alternatives(rendered)

    def _typed(self, name: str, schema: dict[str, Any]) -> str:
        if name == "string":
            return self.string({"type": "string", **{k: schema[k] for k in STRING_KEYS if k in schema}})
        if name == "integer":
            return json_rule({"type": "integer", **{k: schema[k] for k in NUMBER_KEYS if k in schema}})
        if name == "number":
            return json_rule(bounded_number(schema))
        if name == "boolean":
            return f"({literal(self.true)} | {literal(self.false)})"
        if name == "null":
            return literal(self.null)
        if name == "object":
            return self._object(schema)
        return self._array(schema)

    def _object(self, schema: dict[str, Any]) -> str:
        members = self.members(schema, nested=True)
        if members is None:
            return self.open_object(schema.get("additionalProperties", True))
        return f'"{{" {self.ordered(members)} "}}"'

    def members(
        self, schema: dict[str, Any], *, nested: bool, key: Callable[[str], str] | None = None
    ) -> list[tuple[str, bool]] | None:
        """(member expression, required) per declared property; None for an object declaring
        none whose members are open (`additionalProperties` not false; at the top level of a
        tool's parameters, only when it says so explicitly)."""
        properties = schema.get("properties") or {}
        required = schema.get("required") or []
        extra = schema.get("additionalProperties", True if nested else None)
        if not isinstance(properties, dict) or not isinstance(required, list):
            raise Unsupported("malformed properties or required")
        if any(name not in properties for name in required):
            raise Unsupported("a required property without a schema")
        if not properties and extra not in (False, None):
            return None
        members = []
        for name, subschema in properties.items():
            if subschema is False:
                if name in required:
                    raise Unsupported(f"required property {name!r} allows no value")
                continue
            members.append((f"{(key or self.member)(name)} {self.value(subschema)}", name in required))
        return members

    def ordered(self, members: list[tuple[str, bool]]) -> str:
        """The members in order, optional ones left out at will, the separator between those
        written; "" when there are none."""
        if not members:
            return ""
        sep = literal(self.separator)
        # tails[k]: members k.. when something was written before them (each after a separator).
        tails = [""] * (len(members) + 1)
        for k in range(len(members) - 1, 0, -1):
            expr, required = members[k]
            piece = f"{sep} {expr}" if required else f"({sep} {expr})?"
            tails[k] = self.rule(f"{piece} {tails[k + 1]}".strip())
        heads = []
        for k, (expr, required) in enumerate(members):
            heads.append(f"{expr} {tails[k + 1]}".strip())
            if required:
                return "(" + " | ".join(heads) + ")"
        return "(" + " | ".join(heads) + ")?"

    def _array(self, schema: dict[str, Any]) -> str:
        items = schema.get("items", True)
        if isinstance(items, list) or schema.get("uniqueItems") not in (None, False):
            raise Unsupported("tuple items or uniqueItems")
        low, high = schema_count(schema, "minItems") or 0, schema_count(schema, "maxItems")
        if low > MAX_REPEAT or (high is not None and (high > MAX_REPEAT or high < low)):
            raise Unsupported("item counts past what is spelled out")
        if high == 0:
            return '"[" "]"'
        item = self.rule(self.value(items))
        more_low = max(low - 1, 0)
        if high is None:
            times = "*" if more_low == 0 else f"{{{more_low},}}"
        else:
            times = f"{{{more_low},{high - 1}}}"
        body = item if high == 1 else f"{item} ({literal(self.separator)} {item}){times}"
        return f'"[" {body} "]"' if low else f'"[" ({body})? "]"'

    def arguments(
        self, schema: dict[str, Any], key: Callable[[str], str] | None = None, *, open_members: bool = False
    ) -> str:
        """A tool's parameters as ordered members ("" for none), or any members when it declares
        none but says others are allowed and `open_members`; Unsupported (and nothing added)
        unless they are an object this syntax can write."""
        mark = self.checkpoint()
        try:
            resolved = parameters_object(schema)
            members = self.members(resolved, nested=False, key=key)
            if members is None:
                if not open_members:
                    raise Unsupported("parameters without declared properties")
                return self.open_members(resolved["additionalProperties"])
            return self.ordered(members)
        except Unsupported:
            self.rollback(mark)
            raise


class PythonValues(ValueGrammar):
    """Python literals: strings in double quotes (llguidance's JSON strings, whose escapes mean the
    same in Python), True/False/None, dicts with string keys. A value whose schema it cannot spell
    out is written as JSON, which `literal` reads too (true/false/null included)."""

    true = "True"
    false = "False"
    null = "None"
    separator = ", "

    def string(self, schema: dict[str, Any]) -> str:
        return json_rule(schema)

    def render(self, value: Any) -> str:
        return literal(python_literal(value))

    def member(self, key: str) -> str:
        return literal(dump_json(key) + ": ")

    def any_key(self) -> str:
        return f'{json_rule({"type": "string"})} ": "'

    def fallback(self, schema: Any, reason: Unsupported) -> str:
        if not isinstance(schema, dict):
            raise reason
        return json_rule(schema)

    def call(self, name: str, schema: dict[str, Any]) -> str:
        """`name(key=value, ...)`, properties whose names are not identifiers last in a
        `**{"key": value}` dict (as render_python_call writes them); `name(**{...})` with the
        arguments as JSON when the schema is not an object of declared properties."""
        mark = self.checkpoint()
        try:
            arguments = self._keyword_arguments(parameters_object(schema))
        except Unsupported:
            self.rollback(mark)
            return f'{literal(name + "(**")} {json_rule(schema)} ")"'
        return " ".join(part for part in (literal(name + "("), arguments, '")"') if part)

    def _keyword_arguments(self, schema: dict[str, Any]) -> str:
        properties = schema.get("properties") or {}
        if not properties and schema.get("additionalProperties", False) is not False:
            raise Unsupported("parameters without declared properties")

        def members(names: list[str], key: Callable[[str], str]) -> list[tuple[str, bool]]:
            required = [name for name in schema.get("required") or [] if name in names]
            part = {"properties": {name: properties[name] for name in names}, "required": required}
            return self.members({**part, "additionalProperties": False}, nested=False, key=key) or []

        plain = [name for name in properties if is_keyword_name(name)]
        other = [name for name in properties if name not in plain]
        found = members(plain, lambda name: literal(name + "="))
        if other:
            inner = members(other, self.member)
            rest = " ".join(part for part in ('"**{"', self.ordered(inner), '"}"') if part)
            found.append((rest, any(required for _, required in inner)))
        return self.ordered(found)
