"""DeepSeek V3 / R1 / V3.1 tool calls, written with DeepSeek's special tokens.

V3 and R1 write `<｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME` then the arguments in a ```json
fence; V3.1 writes `<｜tool▁call▁begin｜>NAME<｜tool▁sep｜>ARGS`. The bars are U+FF5C and the
word joiners U+2581; matching also takes ASCII `|` and `_`, which quantized or re-tokenized
outputs sometimes show, but the stream markers are the exact tokens.

Constrained decoding (`call_grammar`) allows both forms, each written the way its chat template
writes history, so a V3 / R1 model and a V3.1 model are each held to their own.
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

CALLS_BEGIN = "<｜tool▁calls▁begin｜>"
CALLS_END = "<｜tool▁calls▁end｜>"
CALL_BEGIN = "<｜tool▁call▁begin｜>"
CALL_END = "<｜tool▁call▁end｜>"
SEP = "<｜tool▁sep｜>"
# V3 / R1 arguments: a ```json fence, its markers on their own lines.
_FENCE_OPEN = literal("\n```json\n")
_FENCE_CLOSE = literal("\n```")


def _token(*words: str) -> str:
    return "<[｜|]" + "[▁_ ]".join(words) + "[｜|]>"


_CALLS_BEGIN_RE = _token("tool", "calls", "begin")
_CALL_BEGIN_RE = _token("tool", "call", "begin")
_OPEN_RE = re.compile(f"{_CALLS_BEGIN_RE}|{_CALL_BEGIN_RE}")
_CLOSE_RE = re.compile(_token("tool", "calls", "end"))
_SPLIT_RE = re.compile(f"{_CALLS_BEGIN_RE}|{_CALL_BEGIN_RE}|{_token('tool', 'call', 'end')}")
_SEP_RE = re.compile(_token("tool", "sep"))
# V3/R1: the name on the first line after the separator, then the (fenced) arguments.
_V3_TAIL_RE = re.compile(r"\s*(?P<name>[^\s`{]+)\s*(?P<args>.*)", re.DOTALL)


def _call_of(piece: str) -> ToolCall | None:
    sep = _SEP_RE.search(piece)
    if sep is None:
        return None
    head, tail = piece[: sep.start()], piece[sep.end() :]
    name_text, args_text = head, tail
    if head.strip() == "function" and not tail.lstrip().startswith("{"):
        match = _V3_TAIL_RE.match(tail)
        if match is None:
            return None
        name_text, args_text = match.group("name"), match.group("args")
    name = clean_name(name_text)
    if name is None:
        return None
    arguments = arguments_object(args_text)
    return make_tool_call(name, arguments) if arguments is not None else None


class DeepSeekParser(ToolCallParser):
    """DeepSeek V3, R1 (and their distills that keep the tokens) and V3.1 tool calls."""

    parser_id = "deepseek"

    @property
    def stream_markers(self) -> list[tuple[str, str]]:
        # The section normally wraps every call; a lone call without the section opener is
        # caught by the second pair.
        return [(CALLS_BEGIN, CALLS_END), (CALL_BEGIN, CALL_END)]

    def extract_calls(self, text: str) -> list[ToolCall]:
        return section_calls(text, _OPEN_RE, _CLOSE_RE, _SPLIT_RE, _call_of)

    def render_calls(self, calls: list[ToolCall]) -> str:
        """The V3 / R1 form, as their chat templates write history."""
        if not calls:
            return ""
        body = "\n".join(
            f"{CALL_BEGIN}function{SEP}{call.function.name}\n```json\n{dump_json(call_arguments(call))}\n```{CALL_END}"
            for call in calls
        )
        return f"{CALLS_BEGIN}{body}{CALLS_END}"

    def call_grammar(self, tools: list[dict[str, Any]], *, parallel: bool) -> str | None:
        """One section of calls in the V3 / R1 form (`function` type, fenced arguments, calls
        separated by a newline) or the V3.1 form (name, bare arguments, calls back to back).

        Every special token is a literal of its own, never merged with the text around it, so it
        can be bound to its token id where the tokenizer has one (docs/PARSERS.md).
        """
        if not tools:
            return None
        newline = literal("\n")
        v3_calls = f"v3 ({newline} v3)*" if parallel else "v3"
        v31_calls = "v31+" if parallel else "v31"
        return "\n".join(
            [
                f"start: {literal(CALLS_BEGIN)} ({v3_calls} | {v31_calls}) {literal(CALLS_END)}",
                f"v3: {literal(CALL_BEGIN)} {literal('function')} {literal(SEP)} v3_call {literal(CALL_END)}",
                f"v31: {literal(CALL_BEGIN)} v31_call {literal(CALL_END)}",
                *per_tool("v3_call", tools, lambda name, args: f"{name} {_FENCE_OPEN} {args} {_FENCE_CLOSE}"),
                *per_tool("v31_call", tools, lambda name, args: f"{name} {literal(SEP)} {args}"),
                *arguments_rules(tools),
            ]
        )
