"""Pythonic tool calls: a Python list of keyword calls, `[get_weather(city="Paris"), get_time()]`.

Llama 3.2 (1B/3B) and Llama 4 are prompted to reply with such a list and nothing else; Llama 4
may wrap it in `<|python_start|>` / `<|python_end|>`. Read with `ast`, values by literal only.
"""

from __future__ import annotations

from typing import Any

from mlx_server.parsers.base import ToolCallParser, make_tool_call
from mlx_server.parsers.grammar.blocks import MAX_PARALLEL_CALLS, alternatives, grammar_tools
from mlx_server.parsers.grammar.values import PythonValues
from mlx_server.parsers.lenient_json import call_arguments
from mlx_server.parsers.python_calls import is_keyword_name, leading_list, python_calls, render_python_call
from mlx_server.schemas.openai import ToolCall

PYTHON_START = "<|python_start|>"
PYTHON_END = "<|python_end|>"
# Llama 3 and Llama 4 end-of-turn/message tokens, left in the text when not removed as stop tokens.
END_TOKENS = ("<|eot_id|>", "<|eom_id|>", "<|eot|>", "<|eom|>")


def _calls(source: str) -> list[ToolCall]:
    parsed = python_calls(source)
    return [make_tool_call(name, arguments) for name, arguments in parsed or []]


class PythonicParser(ToolCallParser):
    """A call list the reply starts with, or one inside `<|python_start|>`...`<|python_end|>`.

    A bare list is only taken at the start of the reply (how these models answer with calls);
    later in prose, `[get_weather(city="Paris")]` is an example being talked about.
    """

    parser_id = "pythonic"

    @property
    def stream_markers(self) -> list[tuple[str, str]]:
        return [(PYTHON_START, PYTHON_END)]

    @property
    def leading_markers(self) -> list[str]:
        return ["["]

    def extract_calls(self, text: str) -> list[ToolCall]:
        calls: list[ToolCall] = []
        source = leading_list(text, END_TOKENS)
        if source is not None:
            calls.extend(_calls(source))
        # A marker inside the leading list's strings is text.
        after = len(text) - len(text.lstrip()) + len(source) if calls and source is not None else 0
        at = text.find(PYTHON_START, after)
        while at >= 0:
            start = at + len(PYTHON_START)
            stop = text.find(PYTHON_END, start)
            stop = len(text) if stop < 0 else stop
            calls.extend(_calls(text[start:stop]))
            at = text.find(PYTHON_START, stop)
        return calls

    def render_calls(self, calls: list[ToolCall]) -> str:
        if not calls:
            return ""
        rendered = (render_python_call(call.function.name, call_arguments(call)) for call in calls)
        return f"[{', '.join(rendered)}]"

    def call_grammar(self, tools: list[dict[str, Any]], *, parallel: bool) -> str | None:
        # `[name(key=value, ...), ...]` with Python literals (see PythonValues).
        usable = grammar_tools(tools, _python_name)
        if not usable:
            return None
        values = PythonValues("py")
        call = alternatives([values.call(name, schema) for name, schema in usable])
        more = f' (", " call){{0,{MAX_PARALLEL_CALLS - 1}}}' if parallel else ""
        return "\n".join([f'start: "[" call{more} "]"', f"call: {call}", *values.lines()])


def _python_name(name: str) -> bool:
    """Whether `name(...)` is a Python call: identifiers, dotted for attributes."""
    return all(is_keyword_name(part) for part in name.split("."))
