"""Kimi K2 tool calls: a section of calls, each `functions.NAME:INDEX` then its JSON arguments.

`<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>
{"city": "Paris"}<|tool_call_end|><|tool_calls_section_end|>`. The call id the model writes
(`functions.get_weather:0`) is only used for the name: ids follow the server's `call_` scheme.
Some Kimi checkpoints write the section tokens in the singular (`<|tool_call_section_begin|>`).
"""

from __future__ import annotations

import re
from typing import Any

from mlx_server.parsers.base import ToolCallParser, make_tool_call
from mlx_server.parsers.call_objects import clean_name
from mlx_server.parsers.grammar.blocks import arguments_rules, literal, per_tool
from mlx_server.parsers.lenient_json import arguments_object, call_arguments, dump_json
from mlx_server.parsers.tagged import section_calls
from mlx_server.schemas.openai import ToolCall

SECTION_BEGIN = "<|tool_calls_section_begin|>"
SECTION_END = "<|tool_calls_section_end|>"
CALL_BEGIN = "<|tool_call_begin|>"
ARGUMENT_BEGIN = "<|tool_call_argument_begin|>"
CALL_END = "<|tool_call_end|>"

_OPEN_RE = re.compile(r"<\|tool_calls?_section_begin\|>|<\|tool_call_begin\|>")
_CLOSE_RE = re.compile(r"<\|tool_calls?_section_end\|>")
_SPLIT_RE = re.compile(r"<\|tool_calls?_section_begin\|>|<\|tool_call_begin\|>|<\|tool_call_end\|>")
# `functions.NAME:INDEX`; the namespace and the index are both optional in sloppy output.
_ID_RE = re.compile(r"\s*(?:functions\.)?(?P<name>[^\s:{.](?:[^\s:{]*?[^\s:{.])?)(?::\d+)?\s*")
# Recovery: the argument token left out, arguments right after the id.
_NO_ARG_TOKEN_RE = re.compile(r"\s*(?P<id>(?:functions\.)?[^\s:{]+:\d+)\s*(?P<args>\{.*)", re.DOTALL)


def _call_of(piece: str) -> ToolCall | None:
    call_id, sep, args_text = piece.partition(ARGUMENT_BEGIN)
    if not sep:
        recovered = _NO_ARG_TOKEN_RE.fullmatch(piece)
        if recovered is None:
            return None
        call_id, args_text = recovered.group("id"), recovered.group("args")
    match = _ID_RE.fullmatch(call_id)
    name = clean_name(match.group("name")) if match else None
    if name is None:
        return None
    arguments = arguments_object(args_text)
    return make_tool_call(name, arguments) if arguments is not None else None


class KimiK2Parser(ToolCallParser):
    """Kimi K2 (Instruct, Thinking) tool calls."""

    parser_id = "kimi_k2"

    @property
    def stream_markers(self) -> list[tuple[str, str]]:
        return [
            (SECTION_BEGIN, SECTION_END),
            ("<|tool_call_section_begin|>", "<|tool_call_section_end|>"),
            (CALL_BEGIN, CALL_END),
        ]

    def extract_calls(self, text: str) -> list[ToolCall]:
        return section_calls(text, _OPEN_RE, _CLOSE_RE, _SPLIT_RE, _call_of)

    def render_calls(self, calls: list[ToolCall]) -> str:
        if not calls:
            return ""
        body = "".join(
            f"{CALL_BEGIN}functions.{call.function.name}:{index}{ARGUMENT_BEGIN}{dump_json(call_arguments(call))}{CALL_END}"
            for index, call in enumerate(calls)
        )
        return f"{SECTION_BEGIN}{body}{SECTION_END}"

    def call_grammar(self, tools: list[dict[str, Any]], *, parallel: bool) -> str | None:
        """One section of calls written back to back, as the chat template writes them.

        The index after the name is the model's running call count, which the parser ignores:
        any number below 10000. Every special token is a literal of its own (see
        `DeepSeekParser.call_grammar`).
        """
        if not tools:
            return None
        return "\n".join(
            [
                f"start: {literal(SECTION_BEGIN)} call{'+' if parallel else ''} {literal(SECTION_END)}",
                f"call: {literal(CALL_BEGIN)} {literal('functions.')} named {literal(CALL_END)}",
                *per_tool(
                    "named", tools, lambda name, args: f"{name} INDEX {literal(ARGUMENT_BEGIN)} {args}"
                ),
                "INDEX: /:(0|[1-9][0-9]{0,3})/",
                *arguments_rules(tools),
            ]
        )
