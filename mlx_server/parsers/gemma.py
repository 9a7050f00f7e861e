"""Gemma tool calls: Gemma 4's dedicated tokens, and Gemma 3's prompted forms.

Gemma 4 (Google's "Gemma 4 prompt formatting" and function-calling docs) writes
`<|tool_call>call:get_weather{city:<|"|>Paris<|"|>,days:3}<tool_call|>`: keys bare, strings
between `<|"|>` tokens, numbers/true/false/null bare, `{...}` objects and `[...]` arrays.
Gemma 3 has no tool tokens: it is prompted to reply with a ```tool_code fence holding a Python
call, with a `[func(a=1)]` list, or with a `{"name": ..., "parameters": ...}` object.
"""

from __future__ import annotations

import math
import re
from typing import Any

from mlx_server.parsers.base import ToolCallParser, make_tool_call
from mlx_server.parsers.call_objects import NAME_RE, calls_from_json, json_calls
from mlx_server.parsers.grammar.blocks import (
    alternatives,
    calls_rule,
    grammar_tools,
    json_call_schema,
    json_rule,
    literal,
)
from mlx_server.parsers.grammar.schema import Unsupported, schema_count
from mlx_server.parsers.grammar.values import ValueGrammar
from mlx_server.parsers.lenient_json import call_arguments, dump_json, skip_space, strict_json_at
from mlx_server.parsers.python_calls import leading_list, python_calls
from mlx_server.schemas.openai import ToolCall

TOOL_CALL_START = "<|tool_call>"
TOOL_CALL_END = "<tool_call|>"
STRING_DELIMITER = '<|"|>'
END_OF_TURN = "<turn|>"  # some Gemma 4 builds close a call with it instead of <tool_call|>
GEMMA3_END_OF_TURN = "<end_of_turn>"
TOOL_CODE_START = "```tool_code"
FENCE_END = "```"

_CALL_RE = re.compile(r"call\s*:\s*(" + NAME_RE.pattern + r")\s*\{")
_NUMBER_RE = re.compile(r"-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?")
_SCALARS: dict[str, Any] = {"true": True, "false": False, "null": None, "None": None}
_SPACE = " \t\r\n"
# Keys written bare (the parser reads a key up to its colon); others go between delimiters.
_BARE_KEY = re.compile(r"[\w\-.$@]+")
# Text a string cannot hold: the format has no escapes, and a block ends at the call tokens.
_RESERVED = (STRING_DELIMITER, TOOL_CALL_END, TOOL_CALL_START)
_TEXT = "GEMMA_TEXT"


def _regex(text: str) -> str:
    """`text` as a Lark regex, quotes written `\\x22` so no quoted literal appears in it (the
    service rewrites quoted literals that are the model's added tokens)."""
    return "/" + re.escape(text).replace('"', "\\x22").replace("/", "\\/") + "/"


_TEXT_TERMINAL = (
    f"{_TEXT}: /(?s:.*)/ & ~/(?s:.*)({'|'.join(_regex(token)[1:-1] for token in _RESERVED)})(?s:.*)/"
)


def _skip(text: str, pos: int, chars: str) -> int:
    while pos < len(text) and text[pos] in chars:
        pos += 1
    return pos


def _scalar(token: str) -> Any:
    if token in _SCALARS:
        return _SCALARS[token]
    if _NUMBER_RE.fullmatch(token):
        number = float(token)
        if re.fullmatch(r"-?\d+", token):
            return int(token)
        if math.isfinite(number):
            return number
    return token


def _string(text: str, pos: int) -> tuple[str, int]:
    """A `<|"|>`-delimited string starting at `pos`; an unterminated one runs to the end."""
    start = pos + len(STRING_DELIMITER)
    end = text.find(STRING_DELIMITER, start)
    if end < 0:
        return text[start:], len(text)
    return text[start:end], end + len(STRING_DELIMITER)


def _value(text: str, pos: int) -> tuple[Any, int]:
    pos = _skip(text, pos, _SPACE)
    if text.startswith(STRING_DELIMITER, pos):
        return _string(text, pos)
    if text.startswith("{", pos):
        return _object(text, pos + 1)
    if text.startswith("[", pos):
        return _array(text, pos + 1)
    end = pos
    while end < len(text) and text[end] not in ",}]<":
        end += 1
    token = text[pos:end].strip()
    if len(token) >= 2 and token[0] == token[-1] and token[0] in "\"'":
        return token[1:-1], end  # a plain-quoted string, which the format does not use but models may
    return _scalar(token), end


def _next_item(text: str, pos: int, closer: str) -> tuple[int, int | None]:
    """Where the next member or item of a container starts (separators skipped), and where the
    container ends if it ends there (at `closer`, or cut short by the end of the call)."""
    pos = _skip(text, pos, _SPACE + ",")
    if pos >= len(text) or text.startswith((TOOL_CALL_END, END_OF_TURN), pos):
        return pos, pos
    return pos, (pos + 1 if text[pos] == closer else None)


def _object(text: str, pos: int) -> tuple[dict[str, Any], int]:
    """Members from just after `{` to its `}`; a truncated object keeps what was complete."""
    result: dict[str, Any] = {}
    while True:
        pos, end = _next_item(text, pos, "}")
        if end is not None:
            return result, end
        if text.startswith(STRING_DELIMITER, pos):
            key, pos = _string(text, pos)
            colon = _skip(text, pos, _SPACE)
        else:
            colon = text.find(":", pos)
            if colon < 0:
                return result, len(text)
            key = text[pos:colon].strip().strip("\"'")
        if colon >= len(text) or text[colon] != ":" or not key or "}" in key:
            return result, len(text)
        value, pos = _value(text, colon + 1)
        result[key] = value


def _array(text: str, pos: int) -> tuple[list[Any], int]:
    items: list[Any] = []
    while True:
        pos, end = _next_item(text, pos, "]")
        if end is not None:
            return items, end
        value, end = _value(text, pos)
        if end == pos:  # a stray `}` or `<`: stop rather than loop
            return items, len(text)
        items.append(value)
        pos = end


def _native_calls(block: str) -> list[ToolCall]:
    """`call:name{...}` calls in one `<|tool_call>` block (several may follow one another)."""
    calls: list[ToolCall] = []
    pos = 0
    while (match := _CALL_RE.search(block, pos)) is not None:
        arguments, pos = _object(block, match.end())
        calls.append(make_tool_call(match.group(1), arguments))
    stripped = block.strip()
    if not calls and stripped.startswith("{"):
        calls = json_calls(stripped)  # a JSON call object inside the tokens
    return calls


def _python_calls(source: str) -> list[ToolCall]:
    parsed = python_calls(source, unwrap_print=True)
    return [make_tool_call(name, arguments) for name, arguments in parsed or []]


def _render_key(key: str) -> str:
    return key if _BARE_KEY.fullmatch(key) else f"{STRING_DELIMITER}{key}{STRING_DELIMITER}"


def _render_value(value: Any) -> str:
    if isinstance(value, str):
        return f"{STRING_DELIMITER}{value}{STRING_DELIMITER}"
    if isinstance(value, dict):
        return (
            "{" + ",".join(f"{_render_key(key)}:{_render_value(item)}" for key, item in value.items()) + "}"
        )
    if isinstance(value, list):
        return "[" + ",".join(_render_value(item) for item in value) + "]"
    return dump_json(value)


def _check_writable(value: Any) -> None:
    """Unsupported for a value with text the native syntax cannot carry (see _RESERVED)."""
    if isinstance(value, str):
        if any(token in value for token in _RESERVED):
            raise Unsupported("a string holding Gemma's call tokens")
    elif isinstance(value, dict):
        for key, item in value.items():
            _check_key(key)
            _check_writable(item)
    elif isinstance(value, list):
        for item in value:
            _check_writable(item)
    elif isinstance(value, float) and not math.isfinite(value):
        raise Unsupported("a number JSON cannot write")


def _check_key(key: str) -> None:
    if not key or "}" in key or any(token in key for token in _RESERVED):
        raise Unsupported(f"key {key!r}")


class GemmaValues(ValueGrammar):
    """Gemma 4's argument syntax: bare keys, strings between `<|"|>` tokens taken raw (so they
    cannot hold that token or the call tokens), numbers/true/false/null bare. It has no JSON
    fallback of its own: a tool whose schema it cannot write is given whole as a JSON call."""

    separator = ","

    def string(self, schema: dict[str, Any]) -> str:
        if schema.keys() & {"pattern", "format"}:
            raise Unsupported("pattern or format")
        low, high = schema_count(schema, "minLength") or 0, schema_count(schema, "maxLength")
        bound = "" if high is None else str(high)
        name = f"gemma_string_{low}_{bound or 'n'}"
        if name not in self.shared:
            self.shared.setdefault(_TEXT, _TEXT_TERMINAL)
            text = _TEXT if (low, high) == (0, None) else f"({_TEXT} & /(?s:.{{{low},{bound}}})/)"
            closed, open_ = name.upper(), name.upper() + "_OPEN"
            # Two ways to close: `<|"|>` written as text must end the content terminal itself
            # (a terminal is greedy, it would swallow the start of a separate `<|"|>`); where the
            # delimiter is one of the model's added tokens the service turns the quoted literal
            # into that token, which no text terminal can swallow.
            self.shared[closed] = f"{closed}: {text} {_regex(STRING_DELIMITER)}"
            self.shared[open_] = f"{open_}: {text}"
            delimiter = literal(STRING_DELIMITER)
            self.shared[name] = f"{name}: {delimiter} ({closed} | {open_} {delimiter})"
        return name

    def render(self, value: Any) -> str:
        _check_writable(value)
        return literal(_render_value(value))

    def member(self, key: str) -> str:
        _check_key(key)
        return literal(_render_key(key) + ":")

    def any_key(self) -> str:
        self.shared.setdefault("GEMMA_KEY", "GEMMA_KEY: /[A-Za-z_][A-Za-z0-9_]*/")
        return 'GEMMA_KEY ":"'


def _json_block(text: str, start: int) -> tuple[list[ToolCall], int] | None:
    """A block holding one well-formed JSON call object (or list of them), read whole so that its
    strings may hold the call tokens; its calls and where the block ends."""
    decoded = strict_json_at(text, start)
    if decoded is None:
        return None
    calls = calls_from_json(decoded[0], all_or_none=True)
    end = skip_space(text, decoded[1])
    closed = end == len(text) or text.startswith((TOOL_CALL_END, TOOL_CALL_START, END_OF_TURN), end)
    return (calls, end) if calls and closed else None


class Gemma4Parser(ToolCallParser):
    """Gemma 4 `<|tool_call>call:name{...}<tool_call|>` calls and Gemma 3 ```tool_code fences
    anywhere; a `[func(...)]` list or JSON call object the reply starts with (Gemma 3 prompts)."""

    parser_id = "gemma4"

    @property
    def stream_markers(self) -> list[tuple[str, str]]:
        return [(TOOL_CALL_START, TOOL_CALL_END), (TOOL_CODE_START, FENCE_END)]

    @property
    def leading_markers(self) -> list[str]:
        return ["[", "{"]

    def extract_calls(self, text: str) -> list[ToolCall]:
        found: list[tuple[int, ToolCall]] = []
        blocks: list[tuple[int, int]] = []
        at = text.find(TOOL_CALL_START)
        while at >= 0:
            start = at + len(TOOL_CALL_START)
            block = _json_block(text, start)
            if block is not None:
                calls, stop = block
            else:
                ends = [e for e in (text.find(m, start) for m in (TOOL_CALL_END, TOOL_CALL_START)) if e >= 0]
                stop = min(ends, default=len(text))
                calls = _native_calls(text[start:stop])
            found.extend((at, call) for call in calls)
            blocks.append((at, stop))
            at = text.find(TOOL_CALL_START, stop)
        at = text.find(TOOL_CODE_START)
        while at >= 0:
            inside = next((stop for start, stop in blocks if start < at < stop), None)
            if inside is not None:  # a fence in a call's string is text
                at = text.find(TOOL_CODE_START, inside)
                continue
            start = at + len(TOOL_CODE_START)
            stop = text.find(FENCE_END, start)
            stop = len(text) if stop < 0 else stop
            found.extend((at, call) for call in _python_calls(text[start:stop]))
            at = text.find(TOOL_CODE_START, stop)
        found.extend((-1, call) for call in self._leading_calls(text))
        return [call for _, call in sorted(found, key=lambda item: item[0])]

    @staticmethod
    def _leading_calls(text: str) -> list[ToolCall]:
        source = leading_list(text, (END_OF_TURN, GEMMA3_END_OF_TURN))
        if source is not None:
            return _python_calls(source)
        stripped = text.lstrip()
        return json_calls(stripped) if stripped.startswith("{") else []

    def render_calls(self, calls: list[ToolCall]) -> str:
        return "".join(
            f"{TOOL_CALL_START}call:{call.function.name}{_render_value(call_arguments(call))}{TOOL_CALL_END}"
            for call in calls
        )

    def call_grammar(self, tools: list[dict[str, Any]], *, parallel: bool) -> str | None:
        # Gemma 4's `<|tool_call>call:name{key:value,...}<tool_call|>` per call (see GemmaValues);
        # a tool whose name or schema it cannot write is called with a JSON object in the tokens.
        values = GemmaValues("gemma")
        calls = []
        for name, schema in grammar_tools(tools, lambda name: name == name.strip()):
            try:
                if NAME_RE.fullmatch(name) is None:
                    raise Unsupported("a name the native form cannot write")
                members = values.arguments(schema, open_members=True)
                head, tail = literal(f"{TOOL_CALL_START}call:{name}{{"), literal("}" + TOOL_CALL_END)
                calls.append(" ".join(part for part in (head, members, tail) if part))
            except Unsupported:
                body = json_rule(json_call_schema([(name, schema)], "arguments"))
                calls.append(f"{literal(TOOL_CALL_START)} {body} {literal(TOOL_CALL_END)}")
        if not calls:
            return None
        return "\n".join([f"start: {calls_rule(parallel)}", f"call: {alternatives(calls)}", *values.lines()])
