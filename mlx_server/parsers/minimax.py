"""MiniMax-M2 tool calls: `<invoke>` elements inside one `<minimax:tool_call>` block.

MiniMax-M2's chat template writes every call of a turn in one block:
    <minimax:tool_call>
    <invoke name="get_weather">
    <parameter name="city">Paris</parameter>
    </invoke>
    </minimax:tool_call>
String values are written raw, everything else as JSON, so JSON values are decoded. An invoke
whose body is one JSON object (what constrained decoding writes for a schema beyond named
parameters, see `call_grammar`) is read as the arguments.
"""

from __future__ import annotations

import re
from typing import Any

from mlx_server.parsers.base import ToolCallParser, make_tool_call
from mlx_server.parsers.call_objects import valid_name
from mlx_server.parsers.grammar.blocks import (
    calls_rule,
    grammar_tools,
    json_rule,
    literal,
    one_of,
    sequence,
)
from mlx_server.parsers.grammar.parameters import ParameterGrammar, ParameterSyntax
from mlx_server.parsers.lenient_json import arguments_object, call_arguments, raw_arguments
from mlx_server.parsers.tagged import tagged_blocks
from mlx_server.schemas.openai import ToolCall

OPEN = "<minimax:tool_call>"
CLOSE = "</minimax:tool_call>"
INVOKE = "<invoke"
INVOKE_END = "</invoke>"

# Attribute quotes are sometimes dropped or single by quantized models.
_INVOKE_NAME_RE = re.compile(r"\A\s+name\s*=\s*[\"']?([^\"'>]*?)[\"']?\s*>")
# A value runs to </parameter>, or (cut short) to the next parameter or the end of the invoke.
_PARAM_RE = re.compile(
    r"<parameter\s+name\s*=\s*[\"']?([^\"'>]*?)[\"']?\s*>(.*?)(?:</parameter>|(?=<parameter\b)|\Z)",
    re.DOTALL,
)

# A parameter as the template writes it, for constrained decoding; a raw value may not contain
# a tag (it would end the value, the invoke or the stream segment).
_SYNTAX = ParameterSyntax(
    key_open='<parameter name="',
    key_close='">',
    value_close="</parameter>",
    after="\n",
    stops=("<parameter", "</parameter>", INVOKE, INVOKE_END, OPEN, CLOSE),
    key_forbidden="<>\"'",
)


def _invoke_call(body: str, closed: bool) -> ToolCall | None:
    """A call from the text after `<invoke`: ` name="fn">` then parameters."""
    head = _INVOKE_NAME_RE.match(body)
    if head is None:
        return None
    name = head.group(1).strip()
    if not valid_name(name):
        return None
    rest = body[head.end() :]
    if "<parameter" not in rest and rest.lstrip().startswith("{"):
        # Arguments written as one JSON object (what constrained decoding writes for a schema
        # beyond named parameters).
        arguments_json = arguments_object(rest)
        return make_tool_call(name, arguments_json) if arguments_json is not None else None
    # Only whitespace may come between the invoke tag and its first parameter.
    if rest.split("<parameter", 1)[0].strip():
        return None
    params = _PARAM_RE.findall(body, head.end())
    if not params and not closed:
        return None
    return make_tool_call(name, raw_arguments(params))


class MinimaxM2Parser(ToolCallParser):
    parser_id = "minimax_m2"

    @property
    def stream_markers(self) -> list[tuple[str, str]]:
        return [(OPEN, CLOSE)]

    def extract_calls(self, text: str) -> list[ToolCall]:
        calls: list[ToolCall] = []
        for _, block, _closed in tagged_blocks(text, OPEN, CLOSE):
            for _, body, closed in tagged_blocks(block, INVOKE, INVOKE_END):
                call = _invoke_call(body, closed)
                if call is not None:
                    calls.append(call)
        return calls

    def render_calls(self, calls: list[ToolCall]) -> str:
        if not calls:
            return ""
        invokes = []
        for call in calls:
            params = _SYNTAX.render(call_arguments(call))
            invokes.append(f'{INVOKE} name="{call.function.name}">\n{params}{INVOKE_END}\n')
        return f"{OPEN}\n{''.join(invokes)}{CLOSE}"

    def call_grammar(self, tools: list[dict[str, Any]], *, parallel: bool) -> str | None:
        usable = grammar_tools(tools, valid_name)  # names extract reads
        if not usable:
            return None
        params = ParameterGrammar(_SYNTAX)
        invokes = []
        for name, schema in usable:
            arguments = params.arguments(schema)
            if arguments is None:
                # Beyond named parameters (anyOf, patternProperties, ...): one JSON object.
                arguments = sequence(json_rule(schema), literal("\n"))
            head = literal(f'{INVOKE} name="{name}">\n')
            invokes.append(sequence(head, arguments, literal(INVOKE_END + "\n")))
        # Every call of the turn in one block.
        start = f"start: {literal(OPEN + chr(10))} {calls_rule(parallel)} {literal(CLOSE)}"
        return "\n".join([start, *one_of("call", invokes), *params.definitions()])
