"""Qwen3-Coder tool calls: XML-ish functions with raw-text parameters.

Qwen3-Coder's (and Qwen3.5's) chat template writes
    <tool_call>
    <function=get_weather>
    <parameter=city>
    Paris
    </parameter>
    </function>
    </tool_call>
with each value on its own line: strings raw, objects and arrays as JSON, other values as text.
Values are raw text so code needs no JSON escaping; JSON-looking ones are decoded. Models
sometimes drop the `<tool_call>` wrapper, so a bare `<function=` is a marker too, and a JSON
body inside `<tool_call>` (the Hermes habit) is read as such. Constrained decoding
(`call_grammar`) writes the template's shape, one rule per declared parameter (see
`ParameterGrammar`), or that JSON body for a schema beyond named parameters.
"""

from __future__ import annotations

import re
from typing import Any

from mlx_server.parsers.base import ToolCallParser, make_tool_call
from mlx_server.parsers.call_objects import calls_from_json, valid_name
from mlx_server.parsers.grammar.blocks import (
    grammar_tools,
    json_call_schema,
    json_rule,
    literal,
    one_of,
    repeated,
    sequence,
)
from mlx_server.parsers.grammar.parameters import ParameterGrammar, ParameterSyntax
from mlx_server.parsers.lenient_json import call_arguments, loads_lenient, raw_arguments
from mlx_server.parsers.tagged import tagged_blocks
from mlx_server.schemas.openai import ToolCall

OPEN = "<tool_call>"
CLOSE = "</tool_call>"
FUNCTION = "<function="
FUNCTION_END = "</function>"

# A value runs to </parameter>, or (cut short) to the next parameter or the end of the function.
_PARAM_RE = re.compile(r"<parameter=([^>\n]*)>(.*?)(?:</parameter>|(?=<parameter=)|\Z)", re.DOTALL)

# A parameter as the template writes it, for constrained decoding; a raw value may not contain
# a tag (it would end the value, the function or the stream segment).
_SYNTAX = ParameterSyntax(
    key_open="<parameter=",
    key_close=">\n",
    value_close="\n</parameter>",
    after="\n",
    stops=("<parameter=", "</parameter>", FUNCTION, FUNCTION_END, OPEN, CLOSE),
    key_forbidden="<>\n\"'",
)


def _function_call(body: str, closed: bool) -> ToolCall | None:
    """A call from the text after `<function=`: `name>` then parameters."""
    name, sep, rest = body.partition(">")
    name = name.strip().strip("\"'")
    # Only whitespace may come between `name>` and the first parameter: "<function=name> blocks
    # with one <parameter=key> each" in prose is not a call.
    if not sep or not valid_name(name) or rest.split("<parameter=", 1)[0].strip():
        return None
    params = _PARAM_RE.findall(rest)
    # A bare name is a call without arguments only when its function was closed.
    if not params and not closed:
        return None
    # The template puts each value between newlines; only those two belong to the format.
    pairs = ((key.strip().strip("\"'"), value.removeprefix("\n").removesuffix("\n")) for key, value in params)
    return make_tool_call(name, raw_arguments(pairs))


class Qwen3CoderParser(ToolCallParser):
    parser_id = "qwen3_coder"

    @property
    def stream_markers(self) -> list[tuple[str, str]]:
        return [(OPEN, CLOSE), (FUNCTION, FUNCTION_END)]

    def extract_calls(self, text: str) -> list[ToolCall]:
        found: list[tuple[int, ToolCall]] = []
        for pos, body, closed in tagged_blocks(text, FUNCTION, FUNCTION_END, stops=(CLOSE, OPEN)):
            # `</tool_call>` right after the parameters also closes a function missing its end tag.
            closed = closed or text.startswith(CLOSE, pos + len(FUNCTION) + len(body))
            call = _function_call(body, closed)
            if call is not None:
                found.append((pos, call))
        for pos, body, _closed in tagged_blocks(text, OPEN, CLOSE):
            if FUNCTION not in body and body.lstrip().startswith(("{", "[")):
                found.extend(
                    (pos, call) for call in calls_from_json(loads_lenient(body), require_arguments=False)
                )
        found.sort(key=lambda item: item[0])
        return [call for _, call in found]

    def render_calls(self, calls: list[ToolCall]) -> str:
        blocks = []
        for call in calls:
            params = _SYNTAX.render(call_arguments(call))
            blocks.append(f"{OPEN}\n{FUNCTION}{call.function.name}>\n{params}{FUNCTION_END}\n{CLOSE}")
        return "\n".join(blocks)

    def call_grammar(self, tools: list[dict[str, Any]], *, parallel: bool) -> str | None:
        usable = grammar_tools(tools, valid_name)  # names extract reads
        if not usable:
            return None
        params = ParameterGrammar(_SYNTAX)
        calls = []
        for name, schema in usable:
            arguments = params.arguments(schema)
            if arguments is None:
                # Beyond named parameters (anyOf, patternProperties, ...): the Hermes JSON body
                # inside <tool_call>, which this parser also reads.
                call_json = json_rule(json_call_schema([(name, schema)], "arguments"))
                calls.append(sequence(literal(OPEN + "\n"), call_json, literal("\n" + CLOSE)))
            else:
                head = literal(f"{OPEN}\n{FUNCTION}{name}>\n")
                calls.append(sequence(head, arguments, literal(f"{FUNCTION_END}\n{CLOSE}")))
        return "\n".join([repeated("call", parallel=parallel), *one_of("call", calls), *params.definitions()])
