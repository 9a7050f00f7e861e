"""GLM tool calls: the native arg_key/arg_value format (GLM-4.5/4.6, GLM-4.7) and the XML one.

GLM-4.5/4.6 chat templates write
    <tool_call>get_weather
    <arg_key>city</arg_key>
    <arg_value>Paris</arg_value>
    </tool_call>
with one call per block, blocks on separate lines. GLM-4.7's template writes the same tags with
no newlines at all (`<tool_call>get_weather<arg_key>city</arg_key><arg_value>Paris</arg_value>
</tool_call>`, calls back to back); vLLM's glm47 parser reads both shapes, and so does this one.
Values are raw text; the templates write non-strings as JSON, so JSON values are decoded.

Constrained decoding (`call_grammar`) writes each call the way its template does, one rule per
declared parameter (see `ParameterGrammar`); `glm4_xml` takes its arguments as `%json`.
"""

from __future__ import annotations

import json
import re
from typing import Any, ClassVar

from mlx_server.parsers.base import ToolCallParser, make_tool_call
from mlx_server.parsers.call_objects import calls_from_json, valid_name
from mlx_server.parsers.grammar.blocks import (
    calls_rule,
    grammar_tools,
    json_rule,
    literal,
    one_of,
    repeated,
    sequence,
)
from mlx_server.parsers.grammar.parameters import ParameterGrammar, ParameterSyntax
from mlx_server.parsers.lenient_json import (
    arguments_object,
    call_arguments,
    loads_lenient,
    raw_arguments,
)
from mlx_server.parsers.tagged import tagged_blocks
from mlx_server.schemas.openai import ToolCall

OPEN = "<tool_call>"
CLOSE = "</tool_call>"
KEY = "<arg_key>"
# Text a raw value may not contain: it would end the value, the call or the stream segment.
_GLM_STOPS = ("<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>", OPEN, CLOSE)

# A value runs to </arg_value>, or (cut short) to the next key or the end of the block.
_ARG_RE = re.compile(
    r"<arg_key>(.*?)</arg_key>\s*<arg_value>(.*?)(?:</arg_value>|(?=<arg_key>)|\Z)", re.DOTALL
)
_NAME_TAG_RE = re.compile(r"<name>(.*?)</name>", re.DOTALL)
_ARGUMENTS_TAG_RE = re.compile(r"<arguments>(.*?)(?:</arguments>|\Z)", re.DOTALL)


def _native_calls(body: str, closed: bool) -> list[ToolCall]:
    """Calls in one native block: `name` then arg pairs (or a JSON object, older GLM habits)."""
    head, sep, pairs = body.partition(KEY)
    head = head.lstrip()
    if not sep and head.startswith("{"):
        # Hermes-style JSON written inside GLM tags.
        return calls_from_json(loads_lenient(head), require_arguments=False)
    name, _, rest = head.partition("\n")
    name = name.strip()
    if not valid_name(name):
        return []
    if sep:
        if rest.strip():  # prose between the name and the first key: not a call
            return []
        return [make_tool_call(name, raw_arguments(_ARG_RE.findall(sep + pairs)))]
    if rest.strip():
        # The older GLM-4 "name\n{json}" shape, inside the tags.
        parsed = arguments_object(rest)
        return [make_tool_call(name, parsed)] if parsed is not None else []
    # A bare name is a call without arguments only when its block was closed: "<tool_call>
    # tags" in prose, cut off at the end of the output, is not.
    return [make_tool_call(name, {})] if closed else []


class Glm4NativeParser(ToolCallParser):
    # How the template writes a call, for constrained decoding (GLM-4.7 drops the newlines).
    _SYNTAX: ClassVar[ParameterSyntax] = ParameterSyntax(
        key_open=KEY,
        key_close="</arg_key>\n<arg_value>",
        value_close="</arg_value>",
        after="\n",
        stops=_GLM_STOPS,
        key_forbidden="<>",
    )
    _AFTER_NAME: ClassVar[str] = "\n"
    _CALL_SEPARATOR: ClassVar[str] = "\n"

    parser_id = "glm4_native"

    @property
    def stream_markers(self) -> list[tuple[str, str]]:
        return [(OPEN, CLOSE)]

    def extract_calls(self, text: str) -> list[ToolCall]:
        calls: list[ToolCall] = []
        for _, body, closed in tagged_blocks(text, OPEN, CLOSE):
            calls.extend(_native_calls(body, closed))
        return calls

    def render_calls(self, calls: list[ToolCall]) -> str:
        return self._CALL_SEPARATOR.join(
            f"{OPEN}{call.function.name}{self._AFTER_NAME}{self._SYNTAX.render(call_arguments(call))}{CLOSE}"
            for call in calls
        )

    def call_grammar(self, tools: list[dict[str, Any]], *, parallel: bool) -> str | None:
        usable = grammar_tools(tools, valid_name)  # names extract reads
        if not usable:
            return None
        params = ParameterGrammar(self._SYNTAX)
        calls = []
        for name, schema in usable:
            arguments = params.arguments(schema)
            if arguments is None:
                # Beyond named parameters (anyOf, patternProperties, ...): the arguments as one
                # JSON object after the name, the older GLM-4 shape this parser also reads.
                calls.append(sequence(literal(OPEN + name + "\n"), json_rule(schema), literal(CLOSE)))
            else:
                calls.append(sequence(literal(OPEN + name + self._AFTER_NAME), arguments, literal(CLOSE)))
        if self._CALL_SEPARATOR:
            start = repeated("call", parallel=parallel, separator=self._CALL_SEPARATOR)
        else:  # back to back
            start = f"start: {calls_rule(parallel)}"
        return "\n".join([start, *one_of("call", calls), *params.definitions()])


class Glm47Parser(Glm4NativeParser):
    """GLM-4.7: same tags and reading as GLM-4.5/4.6, written without newlines."""

    _SYNTAX = ParameterSyntax(
        key_open=KEY,
        key_close="</arg_key><arg_value>",
        value_close="</arg_value>",
        after="",
        stops=_GLM_STOPS,
        key_forbidden="<>",
    )
    _AFTER_NAME = ""
    _CALL_SEPARATOR = ""

    parser_id = "glm47"


def _xml_calls(body: str) -> list[ToolCall]:
    name_tag = _NAME_TAG_RE.search(body)
    if name_tag is None:
        stripped = body.strip()
        if stripped.startswith("{"):
            return calls_from_json(loads_lenient(stripped), require_arguments=False)
        return []
    name = name_tag.group(1).strip()
    if not valid_name(name):
        return []
    arguments_tag = _ARGUMENTS_TAG_RE.search(body, name_tag.end())
    arguments = arguments_object(arguments_tag.group(1) if arguments_tag else None)
    return [make_tool_call(name, arguments)] if arguments is not None else []


class Glm4XmlParser(ToolCallParser):
    """`<tool_call><name>fn</name><arguments>{...}</arguments></tool_call>`: the format GLM-4
    models are prompted to write when their template has no native tool support."""

    parser_id = "glm4_xml"

    @property
    def stream_markers(self) -> list[tuple[str, str]]:
        return [(OPEN, CLOSE)]

    def extract_calls(self, text: str) -> list[ToolCall]:
        calls: list[ToolCall] = []
        for _, body, _closed in tagged_blocks(text, OPEN, CLOSE):
            calls.extend(_xml_calls(body))
        return calls

    def render_calls(self, calls: list[ToolCall]) -> str:
        return "\n".join(
            f"{OPEN}\n<name>{call.function.name}</name>\n"
            f"<arguments>{json.dumps(call_arguments(call), ensure_ascii=False)}</arguments>\n{CLOSE}"
            for call in calls
        )

    def call_grammar(self, tools: list[dict[str, Any]], *, parallel: bool) -> str | None:
        usable = grammar_tools(tools, valid_name)  # names extract reads
        if not usable:
            return None
        calls = [
            sequence(
                literal(f"{OPEN}\n<name>{name}</name>\n<arguments>"),
                json_rule(schema),
                literal(f"</arguments>\n{CLOSE}"),
            )
            for name, schema in usable
        ]
        return "\n".join([repeated("call", parallel=parallel), *one_of("call", calls)])
