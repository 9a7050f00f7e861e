"""Arguments written as tagged raw text, one rule per parameter (GLM, Qwen3-Coder, MiniMax).

Terminals (uppercase, regexes) hold no quoted literal and no `"`: the server rewrites quoted
literals that are a model's added tokens (`<tool_call>`, GLM's `</arg_value>`) into token
references (services/pipeline/engine/constraints.py `specialize`), which only rules may hold.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from jsonschema import Draft202012Validator

from mlx_server.parsers.grammar.blocks import json_rule, literal
from mlx_server.parsers.grammar.schema import OBJECT_KEYWORDS, constrains_only
from mlx_server.parsers.lenient_json import encode_value

# What `str.strip()` removes (every `str.isspace()` character) as a regex class body; the tests
# check it against Python's own definition.
SPACE_CLASS = r"\t-\r\x1c-\x20\x{85}\x{a0}\x{1680}\x{2000}-\x{200a}\x{2028}\x{2029}\x{202f}\x{205f}\x{3000}"
# A character of a JSON string as json.loads reads it (no lone surrogate escapes), with and
# without a literal "<" (which bounded strings write as \u003c).
_JSON_CHAR = (
    r"(?:[^\x22\\\x00-\x1f]|\\[\x22\\\x2fbfnrt]|\\u(?:[0-9a-cA-CefEF][0-9a-fA-F]{3}|[dD][0-7][0-9a-fA-F]{2}))"
)
_JSON_CHAR_NO_LT = _JSON_CHAR.replace(r"\x1f]", r"\x1f<]", 1)
# A JSON number json.loads reads back as a finite number (no more digits than its int limit, no
# exponent that overflows), and a JSON integer.
_NUMBER = r"-?(?:0|[1-9][0-9]{0,299})(?:\.[0-9]{1,300})?(?:[eE][+-]?[0-9]{1,2})?"
_INTEGER = r"-?(?:0|[1-9][0-9]{0,299})"
# Text `decode_value` reads as JSON (or repairs): a JSON scalar, `"…"`, `{…}` or `[…]`, padded.
_JSON_LIKE = rf"\{{(?s:.*)\}}|\[(?s:.*)\]|\x22(?s:.*)\x22|{_NUMBER}|true|false|null"
_JSONISH = f"/[{SPACE_CLASS}]*(?:{_JSON_LIKE})[{SPACE_CLASS}]*/"
# Forbidding the tags inside a value whose length is also bounded makes llguidance's lexer build
# (length x tag-matching) states, too many beyond a few dozen characters; such values are kept
# from containing "<" instead (JSON strings can still write it as \u003c).
_TAG_CHECK_MAX_MIN_LENGTH = 32
_SCALARS = frozenset({"string", "null", "boolean", "integer", "number"})
_COMPOUND = frozenset({"object", "array"})
# Names of extra parameters (where additionalProperties allows them): plain identifiers.
_FREE_KEY = r"[A-Za-z_][A-Za-z0-9_.\-]{0,63}"


def _regex_text(text: str) -> str:
    """`text` inside a regex: every character but letters and digits escaped."""
    return "".join(char if char.isalnum() else f"\\x{{{ord(char):x}}}" for char in text)


@dataclass(frozen=True)
class ParameterSyntax:
    """How a format writes one argument: `key_open KEY key_close VALUE value_close after`."""

    key_open: str
    key_close: str
    value_close: str
    after: str
    # Text no raw value may contain: the tags the parser and the stream splitter look for.
    stops: tuple[str, ...]
    # Characters a parameter name may not contain (it would not read back).
    key_forbidden: str

    def render(self, arguments: dict[str, Any]) -> str:
        """`arguments` written this way, each value raw unless it would read back as something
        else (`encode_value`): how the templates write history, and what the grammar accepts."""
        return "".join(
            f"{self.key_open}{key}{self.key_close}{encode_value(value)}{self.value_close}{self.after}"
            for key, value in arguments.items()
        )


def _refs(schema: Any) -> Iterator[Any]:
    """Every `$ref` value in `schema`."""
    if isinstance(schema, dict):
        for key, item in schema.items():
            if key == "$ref":
                yield item
            else:
                yield from _refs(item)
    elif isinstance(schema, list):
        for item in schema:
            yield from _refs(item)


def _repeat(low: int, high: int | None) -> str:
    return f"{{{low},}}" if high is None else f"{{{low},{high}}}"


class ParameterGrammar:
    """Lark rules (llguidance dialect) for the arguments of calls in a tagged-parameter format.

    `arguments(schema)` is the expression for one tool's parameters in the order the schema
    declares them (required ones always, optional ones optionally); `definitions()` are the
    rules and terminals those expressions use. A value's grammar follows its property schema
    and what `decode_value` makes of the text:
    - strings, null, booleans, numbers (a type or list of them, string lengths at most): one
      lexeme; a string raw when `decode_value` gives it back unchanged (so not `42`, `true`,
      `"x"`, `{...}`, which must be written as JSON strings), or as a JSON string;
    - enum/const: exactly the allowed values, as `encode_value` writes them or as JSON;
    - those types together with object/array (or no type: any value): that lexeme, whose raw
      strings may then not start with `{` or `[`, or `%json` of an object/array (the lexer must
      tell the two apart from the first character);
    - anything else (bounded numbers, objects, arrays, patterns, formats, combinators):
      `%json` of the property schema, which the parser decodes.
    Raw text never contains the format's tags (`ParameterSyntax.stops`); with a maxLength (or a
    minLength above 32) it contains no "<" at all, which JSON strings write as \\u003c. Text
    inside `%json` values is not checked for tags (as in the JSON-bodied formats).

    llguidance's lexer is greedy: raw text that may contain "<" cannot be followed by a closing
    tag in another lexeme, so a value is one lazy lexeme ending with its closing tag's text; when
    that tag is one added token of the model (GLM's `</arg_value>`), the value is its own lexeme
    followed by the (bound) tag, which text cannot run into.
    """

    def __init__(self, syntax: ParameterSyntax) -> None:
        self._syntax = syntax
        self._lines: list[str] = []
        self._names: dict[tuple[str, str], str] = {}

    def definitions(self) -> list[str]:
        return list(self._lines)

    def _define(self, kind: str, body: str, *, terminal: bool = False, options: str = "") -> str:
        """A rule (or terminal) named after `kind` for `body`, defined once per grammar."""
        key = (kind + options, body)
        if key not in self._names:
            name = f"tg_{kind}_{len(self._names)}"
            self._names[key] = name.upper() if terminal else name
            self._lines.append(f"{self._names[key]}{options}: {body}")
        return self._names[key]

    def _tags(self) -> str:
        """Text that contains one of the format's tags."""
        tags = "|".join(_regex_text(stop) for stop in self._syntax.stops)
        return self._define("tags", f"/(?s:.*)(?:{tags})(?s:.*)/", terminal=True)

    def _text(self, low: int, high: int | None) -> tuple[str, str]:
        """(raw text, JSON string) of `low`..`high` characters without the format's tags."""
        if high is None and low <= _TAG_CHECK_MAX_MIN_LENGTH:
            tags = self._tags()
            return f"/(?s:.{{{low},}})/ & ~{tags}", rf"/\x22{_JSON_CHAR}{{{low},}}\x22/ & ~{tags}"
        return f"/[^<]{_repeat(low, high)}/", rf"/\x22{_JSON_CHAR_NO_LT}{_repeat(low, high)}\x22/"

    def _closed(self, text: str) -> str:
        """A value: the terminal `text`, then the closing tag."""
        close = self._syntax.value_close
        # As text: one lazy lexeme, ending at the first closing tag (which `text` cannot hold).
        closed = self._define("closed", f"{text} /{_regex_text(close)}/", terminal=True)
        lazy = self._define("lazy", closed, options="[lazy]")
        # As an added token (bound by the server): `text` ends where the token comes.
        return self._define("value", f"{lazy} | {text} {literal(close)}")

    def _scalar_value(self, kinds: set[str], low: int, high: int | None, *, compound: bool) -> str:
        """Strings, null, booleans, numbers (no bounds) as one lexeme: what `decode_value` reads."""
        choices: list[str] = []
        if "string" in kinds:
            raw, quoted = self._text(low, high)
            raw = f"{raw} & ~{_JSONISH}"
            if compound:  # "{" and "[" start the %json alternative: the lexer must tell them apart
                raw += r" & ~/[\{\[](?s:.*)/"
            choices += [f"({raw})", f"({quoted})"]
        if "null" in kinds:
            choices.append("/null/")
        if "boolean" in kinds:
            choices.append("/true|false/")
        if "number" in kinds:
            choices.append(f"/{_NUMBER}/")
        elif "integer" in kinds:
            choices.append(f"/{_INTEGER}/")
        return self._closed(self._define("scalar", " | ".join(choices), terminal=True))

    def _enum_value(self, schema: dict[str, Any]) -> str | None:
        values = schema["enum"] if "enum" in schema else [schema["const"]]
        if not isinstance(values, list) or any(True for _ in _refs(schema)):
            return None
        try:
            validator = Draft202012Validator(schema)
            allowed = [value for value in values if validator.is_valid(value)]
        except Exception:  # not a valid schema: %json reports it
            return None
        forms: list[str] = []
        for value in allowed:
            for form in (encode_value(value), json.dumps(value, ensure_ascii=False)):
                if form not in forms and not any(stop in form for stop in self._syntax.stops):
                    forms.append(form)
        # The forms are one lexeme followed by the closing tag: a form that another one extends
        # with the tag's first character would take the tag for more of itself.
        close = self._syntax.value_close
        forms = [
            form
            for form in forms
            if not any(form.startswith(other + close[0]) for other in forms if other != form)
        ]
        if not forms:
            return None
        choices = "|".join(_regex_text(form) for form in forms)
        return self._define(
            "enum", f"{self._define('enum', f'/(?:{choices})/', terminal=True)} {literal(close)}"
        )

    def _value(self, schema: dict[str, Any], defs: dict[str, Any]) -> str:
        """A value of `schema`, followed by its closing tag."""
        if ("enum" in schema or "const" in schema) and (enum := self._enum_value(schema)):
            return enum
        types = schema.get("type", sorted(_SCALARS | _COMPOUND))
        kinds = {types} if isinstance(types, str) else set(types) if isinstance(types, list) else set()
        low, high = schema.get("minLength", 0), schema.get("maxLength")
        simple = constrains_only(schema, {"type", "minLength", "maxLength"})
        if simple and kinds & _SCALARS and isinstance(low, int) and (high is None or isinstance(high, int)):
            compound = sorted(kinds & _COMPOUND)
            scalar = self._scalar_value(kinds & _SCALARS, low, high, compound=bool(compound))
            if not compound:
                return scalar
            # Objects and arrays (unconstrained but for their type) start with "{" or "[".
            return self._define("either", f"{scalar} | {self._json_value({'type': compound}, {})}")
        return self._json_value(schema, defs)

    def _json_value(self, schema: dict[str, Any], defs: dict[str, Any]) -> str:
        return self._define("json", f"{json_rule({**schema, **defs})} {literal(self._syntax.value_close)}")

    def _param(self, key: str, value: str) -> str:
        syntax = self._syntax
        parts = [key, value, literal(syntax.after) if syntax.after else ""]
        return self._define("param", " ".join(part for part in parts if part))

    def arguments(self, schema: dict[str, Any]) -> str | None:
        """The parameters of arguments `schema` as a Lark expression ("" for none), or None when
        the schema is more than named parameters (the caller writes the arguments as JSON)."""
        syntax = self._syntax
        properties = schema.get("properties", {})
        required = schema.get("required", [])
        additional = schema.get("additionalProperties")
        if (
            schema.get("type") != "object"
            or not constrains_only(schema, OBJECT_KEYWORDS)  # else: written as one JSON object
            or not isinstance(properties, dict)
            or not isinstance(required, list)
            or any(name not in properties for name in required)
            or not all(
                isinstance(item, dict | bool) and self._key_ok(name) for name, item in properties.items()
            )
            or not isinstance(additional, dict | bool | None)
            or not all(
                isinstance(ref, str) and ref.startswith(("#/$defs/", "#/definitions/"))
                for ref in _refs(schema)
            )
        ):
            return None
        # Property schemas keep their $refs resolvable.
        defs: dict[str, Any] = {key: schema[key] for key in ("$defs", "definitions") if key in schema}
        parts: list[str] = []
        for name, item in properties.items():
            if item is False:  # may not be given
                if name in required:
                    return None
                continue
            value = self._value(item if isinstance(item, dict) else {}, defs)
            param = self._param(literal(syntax.key_open + name + syntax.key_close), value)
            parts.append(param if name in required else f"{param}?")
        # Parameters beyond the declared ones where the schema allows them explicitly (or
        # declares none at all); with declared properties and no additionalProperties, only
        # those (what a model is asked for).
        if additional is True or isinstance(additional, dict) or (additional is None and not properties):
            key = f"/{_FREE_KEY}/"
            if properties:
                key += " & ~/(?:" + "|".join(_regex_text(name) for name in properties) + ")/"
            value = self._value(additional if isinstance(additional, dict) else {}, defs)
            key = self._define("key", key, terminal=True)
            head = f"{literal(syntax.key_open)} {key} {literal(syntax.key_close)}"
            parts.append(f"{self._param(head, value)}*")
        return " ".join(parts)

    def _key_ok(self, key: str) -> bool:
        forbidden = self._syntax.key_forbidden
        return bool(key) and key == key.strip() and not any(char in key for char in forbidden)
