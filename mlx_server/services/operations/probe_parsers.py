"""How the probe (probe.py) tells which tool-call and thinking parsers a model needs: every
parser reads the model's one answer to the weather question (or its reasoning), family default
first, as inference would read it."""

from __future__ import annotations

from mlx_server.parsers.base import ThinkingParser
from mlx_server.parsers.null import NullThinkingParser
from mlx_server.parsers.registry import THINKING_PARSERS, TOOL_PARSERS
from mlx_server.parsers.thinking import opens_thinking
from mlx_server.services.pipeline.json_calls import JsonCallReader
from mlx_server.services.pipeline.request import Tool
from mlx_server.services.pipeline.streaming import parse_output

TOOL_NAME = "get_weather"
WEATHER_TOOL = Tool(
    TOOL_NAME,
    "Current weather in a city",
    {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
)


def find_tool_parser(default_id: str, output: str) -> str:
    """The first parser that reads a `get_weather` call in `output`: the family default (also for
    a call written as plain JSON, which inference takes with it), then every registered parser in
    registry order; "null" when none does.

    Every parser reads the one output rather than a generation of its own. With a template that
    renders tools, the prompt does not depend on the parser, so greedy decoding would write the
    same text for each; with tools in the system prompt, a prompt per parser would only show the
    model another format to copy, while the question is what it writes when asked the way
    inference asks it. One generation instead of fifteen (~15 s each here).
    """
    if default_id != "null" and _json_call(default_id, output):
        return default_id
    others = [pid for pid in TOOL_PARSERS if pid not in (default_id, "null")]
    return next((pid for pid in others if TOOL_PARSERS[pid]().validates(output, TOOL_NAME)), "null")


def _json_call(parser_id: str, output: str) -> bool:
    """Whether inference, with the weather tool declared, takes a call from `output` with this
    parser: in its format (`validates`), or written as plain JSON (services/pipeline/json_calls.py)."""
    if TOOL_PARSERS[parser_id]().validates(output, TOOL_NAME):
        return True
    reader = JsonCallReader([WEATHER_TOOL])
    result = parse_output(
        output, TOOL_PARSERS[parser_id](), NullThinkingParser(), tools_declared=True, json_calls=reader
    )
    return any(call.function.name == TOOL_NAME for call in result.tool_calls)


def find_thinking_parser(default_id: str, prompt: str, output: str) -> str:
    """The first thinking parser (the family default, then every registered one) that finds
    reasoning in `output`, read as inference reads it: after the block the prompt opened."""
    candidates = [default_id, *(pid for pid in THINKING_PARSERS if pid not in (default_id, "null"))]
    for parser_id in candidates:
        parser = THINKING_PARSERS[parser_id]()
        if parser.validates(_opened_marker(prompt, parser) + output):
            return parser_id
    return "null"


def _opened_marker(prompt: str, parser: ThinkingParser) -> str:
    if not opens_thinking(prompt, parser):
        return ""
    return next(start for start, _ in parser.stream_markers if prompt.rstrip().endswith(start.strip()))


def template_mentions_thinking(template: str) -> bool:
    """Whether the chat template toggles reasoning or writes a reasoning marker."""
    markers = {start.strip() for cls in THINKING_PARSERS.values() for start, _ in cls().stream_markers}
    return "enable_thinking" in template or any(marker in template for marker in markers if marker)
