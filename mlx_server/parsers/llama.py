"""Llama 3.x tool calls (Meta's llama-models prompt formats for 3.1 / 3.2 / 3.3).

Llama writes a call in one of three ways, depending on the tool prompt:
- custom tools: `<function=get_weather>{"city": "Paris"}</function>`
- the JSON tool prompt: a bare `{"name": "get_weather", "parameters": {"city": "Paris"}}`
- built-in tools: `<|python_tag|>brave_search.call(query="...")<|eom_id|>`, or after the same
  tag a JSON call object, or plain Python code for code_interpreter.
"""

from __future__ import annotations

import re
from typing import Any

from mlx_server.parsers.base import ToolCallParser, make_tool_call
from mlx_server.parsers.call_objects import NAME_RE, json_calls
from mlx_server.parsers.grammar.blocks import (
    alternatives,
    calls_rule,
    grammar_tools,
    json_call_schema,
    json_rule,
    literal,
)
from mlx_server.parsers.grammar.values import PythonValues
from mlx_server.parsers.lenient_json import (
    arguments_object,
    call_arguments,
    dump_json,
    skip_space,
    strict_json_at,
    strip_fence,
)
from mlx_server.parsers.python_calls import bracket_end, parse_python, python_calls, render_python_call
from mlx_server.schemas.openai import ToolCall

FUNCTION_START = "<function="
FUNCTION_END = "</function>"
PYTHON_TAG = "<|python_tag|>"
END_OF_MESSAGE = "<|eom_id|>"  # the model expects a tool result next
END_OF_TURN = "<|eot_id|>"

# Meta's built-in tools take one `query` and are written `name.call(query=...)`.
BUILTIN_QUERY_TOOLS = frozenset({"brave_search", "wolfram_alpha"})
CODE_INTERPRETER = "code_interpreter"

_FUNCTION_RE = re.compile(r"<function=\s*([^>\n]*?)\s*>")


def _next(text: str, start: int, markers: tuple[str, ...]) -> int:
    """Where the first of `markers` after `start` is, or the end of the text."""
    found = [at for at in (text.find(m, start) for m in markers) if at >= 0]
    return min(found, default=len(text))


def _strict_arguments(text: str, start: int) -> tuple[dict[str, Any], int] | None:
    """Arguments written as one well-formed JSON object, then `</function>` (or the end of the
    call), and where the call ends; read whole, so a string may hold `</function>`."""
    decoded = strict_json_at(text, start)
    if decoded is None or not isinstance(decoded[0], dict):
        return None
    arguments, end = decoded
    end = skip_space(text, end)
    if text.startswith(FUNCTION_END, end):
        return arguments, end + len(FUNCTION_END)
    if end == len(text) or text.startswith((FUNCTION_START, END_OF_TURN, END_OF_MESSAGE), end):
        return arguments, end
    return None


def _tool_name(name: str) -> str | None:
    """`brave_search.call` is the built-in brave_search, `get_weather` a custom tool; another
    dotted name (`math.sqrt`) is library code to run, not a tool."""
    base = name.removesuffix(".call")
    return None if "." in base else base


def _python_tag_body_calls(body: str) -> list[ToolCall]:
    """What follows `<|python_tag|>`: JSON call objects, `tool.call(...)` statements, or code."""
    body = strip_fence(body)
    if not body:
        return []
    if body[0] in "{[":
        calls = json_calls(body)
        if calls or body[0] == "{":
            return calls
    parsed = [(_tool_name(name), arguments) for name, arguments in python_calls(body) or []]
    if parsed and all(name for name, _ in parsed):
        return [make_tool_call(str(name), arguments) for name, arguments in parsed]
    # The tag means "code follows": Meta's reference decoder sends code that is not a tool call
    # to code_interpreter. Only real Python qualifies, so stray prose is not turned into a call.
    if body[0] != "[" and parse_python(body) is not None:
        return [make_tool_call(CODE_INTERPRETER, {"code": body})]
    return []


def _complete_body_end(text: str, start: int) -> int | None:
    """Where a complete JSON value or Python call written right after the tag ends, if only
    spaces and then the end of the body follow it: such a body may hold `<|eom_id|>` in a string."""
    pos = skip_space(text, start)
    end: int | None = None
    if text.startswith("{", pos):
        decoded = strict_json_at(text, pos)
        end = decoded[1] if decoded is not None else None
    elif text.startswith("[", pos):
        end = bracket_end(text, pos)
    elif (name := NAME_RE.match(text, pos)) is not None and text.startswith("(", name.end()):
        end = bracket_end(text, name.end())
    if end is None:
        return None
    after = skip_space(text, end)
    if after < len(text) and not text.startswith((END_OF_MESSAGE, END_OF_TURN, PYTHON_TAG), after):
        return None
    return end


def python_tag_calls(text: str) -> list[tuple[int, int, ToolCall]]:
    """Every `<|python_tag|>` call in `text`, with where its tag starts and its body ends; the body
    is a complete JSON value or call, else runs to `<|eom_id|>`, `<|eot_id|>`, the next tag, or
    the end of the output (a stop token the server removed)."""
    found: list[tuple[int, int, ToolCall]] = []
    at = text.find(PYTHON_TAG)
    while at >= 0:
        start = at + len(PYTHON_TAG)
        stop = _complete_body_end(text, start)
        if stop is None:
            stop = _next(text, start, (END_OF_MESSAGE, END_OF_TURN, PYTHON_TAG))
        found.extend((at, stop, call) for call in _python_tag_body_calls(text[start:stop]))
        at = text.find(PYTHON_TAG, stop)
    return found


def _outside(
    spans: list[tuple[int, int, ToolCall]], inner: list[tuple[int, int, ToolCall]]
) -> list[tuple[int, int, ToolCall]]:
    """The calls of `inner` that do not start inside one of `spans` (text in a call's string)."""
    return [item for item in inner if not any(start < item[0] < end for start, end, _ in spans)]


def render_python_tag_call(call: ToolCall) -> str:
    name, arguments = call.function.name, call_arguments(call)
    if name in BUILTIN_QUERY_TOOLS and set(arguments) == {"query"}:
        body = render_python_call(f"{name}.call", arguments)
    elif (
        name == CODE_INTERPRETER
        and set(arguments) == {"code"}
        and isinstance(arguments["code"], str)
        and python_calls(arguments["code"]) is None
        and parse_python(arguments["code"]) is not None
    ):
        body = arguments["code"]
    else:
        body = dump_json({"name": name, "parameters": arguments})
    return f"{PYTHON_TAG}{body}{END_OF_MESSAGE}"


class LlamaXmlParser(ToolCallParser):
    """Llama 3.x: `<function=name>{...}</function>` anywhere, a bare JSON call object the reply
    starts with, and `<|python_tag|>` calls (so one parser covers every form a Llama 3 writes)."""

    parser_id = "llama_xml"

    @property
    def stream_markers(self) -> list[tuple[str, str]]:
        return [(FUNCTION_START, FUNCTION_END), (PYTHON_TAG, END_OF_MESSAGE)]

    @property
    def leading_markers(self) -> list[str]:
        # The JSON tool prompt's reply *is* the object.
        return ["{"]

    def extract_calls(self, text: str) -> list[ToolCall]:
        tags, python = self._function_tag_calls(text), python_tag_calls(text)
        # A tag inside another call's string is text, not a call.
        found = _outside(python, tags) + _outside(tags, python)
        stripped = text.lstrip()
        if stripped.startswith(("{", "```")):
            leading = stripped if stripped[0] == "{" else strip_fence(stripped)
            found.extend((-1, -1, call) for call in json_calls(leading))
        return [call for _, _, call in sorted(found, key=lambda item: item[0])]

    @staticmethod
    def _function_tag_calls(text: str) -> list[tuple[int, int, ToolCall]]:
        found: list[tuple[int, int, ToolCall]] = []
        pos = 0
        while (match := _FUNCTION_RE.search(text, pos)) is not None:
            pos = match.end()
            name = match.group(1)
            if not NAME_RE.fullmatch(name):
                continue
            strict = _strict_arguments(text, match.end())
            if strict is not None:
                arguments, pos = strict
                found.append((match.start(), pos, make_tool_call(name, arguments)))
                continue
            stop = _next(text, match.end(), (FUNCTION_END, FUNCTION_START, END_OF_TURN, END_OF_MESSAGE))
            lenient = arguments_object(text[match.end() : stop])
            if lenient is not None:
                found.append((match.start(), stop, make_tool_call(name, lenient)))
        return found

    def render_calls(self, calls: list[ToolCall]) -> str:
        return "".join(
            f"{FUNCTION_START}{call.function.name}>{dump_json(call_arguments(call))}{FUNCTION_END}"
            for call in calls
        )

    def call_grammar(self, tools: list[dict[str, Any]], *, parallel: bool) -> str | None:
        # `<function=name>{json}</function>` per call, calls back to back, as render_calls writes.
        usable = grammar_tools(tools, lambda name: NAME_RE.fullmatch(name) is not None)
        if not usable:
            return None
        calls = [
            f"{literal(f'{FUNCTION_START}{name}>')} {json_rule(schema)} {literal(FUNCTION_END)}"
            for name, schema in usable
        ]
        return "\n".join([f"start: {calls_rule(parallel)}", f"call: {alternatives(calls)}"])


class LlamaPythonParser(ToolCallParser):
    """Llama 3.1 built-in tools: `<|python_tag|>brave_search.call(query="...")<|eom_id|>`, a JSON
    call object after the tag, or code for code_interpreter."""

    parser_id = "llama_python"

    @property
    def stream_markers(self) -> list[tuple[str, str]]:
        # Without `<|eom_id|>` (a stop token the server removed) the call runs to the end.
        return [(PYTHON_TAG, END_OF_MESSAGE)]

    def extract_calls(self, text: str) -> list[ToolCall]:
        return [call for _, _, call in python_tag_calls(text)]

    def render_calls(self, calls: list[ToolCall]) -> str:
        return "".join(render_python_tag_call(call) for call in calls)

    def call_grammar(self, tools: list[dict[str, Any]], *, parallel: bool) -> str | None:
        # `<|python_tag|>` + a JSON call object (brave_search/wolfram_alpha also as
        # `name.call(query="...")`), then `<|eom_id|>`: optional, as the model may end its turn
        # with the real token instead.
        usable = grammar_tools(tools, lambda name: name == name.strip())
        if not usable:
            return None
        values = PythonValues("py")
        bodies = [json_rule(json_call_schema(usable, "parameters"))]
        bodies += [
            values.call(f"{name}.call", schema) for name, schema in usable if name in BUILTIN_QUERY_TOOLS
        ]
        return "\n".join(
            [
                f"start: {calls_rule(parallel)}",
                f"call: {literal(PYTHON_TAG)} {alternatives(bodies)} {literal(END_OF_MESSAGE)}?",
                *values.lines(),
            ]
        )
