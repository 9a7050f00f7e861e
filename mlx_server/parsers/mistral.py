"""Mistral tool calls: everything after the `[TOOL_CALLS]` control token.

Two generations of the format (mistral-common tokenizer versions):
- before v11 (Mistral 7B v0.3, Mixtral 8x22B, Nemo): one JSON array,
  `[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Paris"}, "id": "a1b2c3d4e"}]`
- v11 and later (Mistral Small 3.1+/3.2, Magistral, Devstral): name then arguments per call,
  `[TOOL_CALLS]get_weather[ARGS]{"city": "Paris"}`, the token repeated before each call; some
  versions put `[CALL_ID]<id>` between the name and `[ARGS]`.
Mistral models end the turn after their calls, so a call runs to the end of the output.
"""

from __future__ import annotations

from typing import Any

from mlx_server.parsers.base import ToolCallParser, make_tool_call
from mlx_server.parsers.call_objects import NAME_RE, calls_from_json
from mlx_server.parsers.grammar.blocks import alternatives, calls_rule, grammar_tools, json_rule, literal
from mlx_server.parsers.lenient_json import (
    arguments_object,
    call_arguments,
    dump_json,
    loads_lenient,
    skip_space,
    strict_json_at,
)
from mlx_server.schemas.openai import ToolCall

TOOL_CALLS = "[TOOL_CALLS]"
ARGS = "[ARGS]"
CALL_ID = "[CALL_ID]"
END_OF_SEQUENCE = "</s>"


def _json_at(text: str, pos: int, stop: int) -> tuple[Any, int]:
    """The JSON value at `pos` and where it ends: strictly if it is well formed (so a value may
    hold `[TOOL_CALLS]` in a string), else leniently over the text up to `stop`."""
    decoded = strict_json_at(text, pos)
    if decoded is not None:
        return decoded
    return loads_lenient(text[skip_space(text, pos) : stop].replace(END_OF_SEQUENCE, "")), stop


def _array_after_text(text: str, start: int, stop: int) -> tuple[list[ToolCall], int]:
    """The calls of the first well-formed JSON array of calls in `text[start:stop]` (a model's
    words between `[TOOL_CALLS]` and its array), and where it ends; strict, so prose with
    brackets is never read as a call."""
    at = text.find("[", start, stop)
    while at >= 0:
        value, end = strict_json_at(text, at) or (None, at)
        calls = calls_from_json(value, all_or_none=True) if isinstance(value, list) else []
        if calls and end <= stop:
            return calls, end
        at = text.find("[", at + 1, stop)
    return [], start


class MistralParser(ToolCallParser):
    """`[TOOL_CALLS]` followed by a JSON array (pre-v11) or `name[ARGS]{...}` calls (v11+)."""

    parser_id = "mistral"

    @property
    def stream_markers(self) -> list[tuple[str, str]]:
        return [(TOOL_CALLS, "")]

    @property
    def leading_markers(self) -> list[str]:
        # A reply that is a bare call array: the control token was dropped in decoding.
        return ["["]

    def extract_calls(self, text: str) -> list[ToolCall]:
        at = text.find(TOOL_CALLS)
        if at < 0:
            stripped = text.lstrip()
            if not stripped.startswith("["):
                return []
            value, _ = _json_at(stripped, 0, len(stripped))
            return calls_from_json(value, all_or_none=True)
        calls: list[ToolCall] = []
        while at >= 0:
            start = skip_space(text, at + len(TOOL_CALLS))
            stop = text.find(TOOL_CALLS, start)
            stop = len(text) if stop < 0 else stop
            if text.startswith(("[", "{"), start):
                value, end = _json_at(text, start, stop)
                calls.extend(calls_from_json(value, all_or_none=True))
            elif text.startswith("```", start):  # a fenced array
                end = stop
                fenced = loads_lenient(text[start:stop].replace(END_OF_SEQUENCE, ""))
                calls.extend(calls_from_json(fenced, all_or_none=True))
            else:
                call, end = self._named_call(text, start, stop)
                if call is not None:
                    calls.append(call)
                else:  # stray text between the marker and a call array
                    found, end = _array_after_text(text, start, stop)
                    calls.extend(found)
            at = text.find(TOOL_CALLS, max(end, start))
        return calls

    @staticmethod
    def _named_call(text: str, start: int, stop: int) -> tuple[ToolCall | None, int]:
        """`name[CALL_ID]id[ARGS]{...}` (the id and `[ARGS]` optional, as tokenizers differ)."""
        match = NAME_RE.match(text, start)
        if match is None or match.end() > stop:
            return None, start
        name, pos = match.group(), skip_space(text, match.end())
        if text.startswith(CALL_ID, pos):
            pos += len(CALL_ID)
            while pos < stop and not text.startswith(ARGS, pos) and text[pos] != "{":
                pos += 1
        if text.startswith(ARGS, pos):
            pos += len(ARGS)
        elif not text.startswith("{", pos):
            return None, start  # "[TOOL_CALLS]I cannot ..." is prose, not a call
        if not text[pos:stop].replace(END_OF_SEQUENCE, "").strip():
            return make_tool_call(name, {}), stop
        value, end = _json_at(text, pos, stop)
        arguments = arguments_object(value) if isinstance(value, dict | str) else None
        if arguments is None:
            return None, stop
        return make_tool_call(name, arguments), end

    def render_calls(self, calls: list[ToolCall]) -> str:
        return "".join(
            f"{TOOL_CALLS}{call.function.name}{ARGS}{dump_json(call_arguments(call))}" for call in calls
        )

    def call_grammar(self, tools: list[dict[str, Any]], *, parallel: bool) -> str | None:
        # The v11+ form current models write: `[TOOL_CALLS]name[ARGS]{json}`, repeated per call.
        usable = grammar_tools(tools, lambda name: NAME_RE.fullmatch(name) is not None)
        if not usable:
            return None
        calls = [f"{literal(f'{TOOL_CALLS}{name}{ARGS}')} {json_rule(schema)}" for name, schema in usable]
        return "\n".join([f"start: {calls_rule(parallel)}", f"call: {alternatives(calls)}"])
