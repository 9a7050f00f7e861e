"""Fenced and bare JSON calls (services/pipeline/json_calls.py): with tools declared, a JSON
object naming a declared tool with arguments that fit its schema is a call in every format's
chain, the same streamed at any split as in one piece; JSON that is not such a call stays
content, exactly as written. The outside corpus keeps its results with the recovery on."""

from __future__ import annotations

import importlib
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mlx_server.parsers.null import NullThinkingParser
from mlx_server.parsers.registry import TOOL_PARSERS
from mlx_server.parsers.thinking import ThinkTagParser
from mlx_server.services.pipeline.json_calls import MAX_BLOCK_CHARS, JsonCallReader
from mlx_server.services.pipeline.protocols.openai_request import chat_tools
from mlx_server.services.pipeline.streaming import ParseResult, StreamingProcessor, parse_output

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
            "required": ["city"],
            "additionalProperties": False,
        },
    },
}
READER = JsonCallReader(chat_tools([WEATHER]) or ())
PARIS = ("get_weather", {"city": "Paris"})
CALL = '{"name": "get_weather", "arguments": {"city": "Paris"}}'


def fenced(body: str, language: str = "json") -> str:
    return f"```{language}\n{body}\n```"


NOT_DECLARED = fenced('{"name": "get_time", "arguments": {}}')
NOT_A_CALL = fenced('{"name": "Ada", "age": 36}')
WRONG_ARGUMENTS = fenced('{"name": "get_weather", "arguments": {"town": "Paris"}}')
CODE = fenced("weather = {\n    'city': 'Paris'\n}", "python")
TRUNCATED = 'Sure.\n{"name": "get_weather", "arguments": {"city": "Par'
ROME = CALL.replace("Paris", "Rome")
# (name, output, expected calls, expected content); arguments as written (the checker coerces)
CASES: list[tuple[str, str, list[tuple[str, Any]], str]] = [
    (
        "qwen_fence",
        fenced('{\n  "name": "get_weather",\n  "arguments": {\n    "city": "Paris"\n  }\n}'),
        [PARIS],
        "",
    ),
    (
        "prose_around_fence",
        f"Let me check.\n{fenced(CALL)}\nOne moment.",
        [PARIS],
        "Let me check.\n\nOne moment.",
    ),
    ("bare_fence_array", fenced(f"[{CALL}, {ROME}]", ""), [PARIS, ("get_weather", {"city": "Rome"})], ""),
    ("bare_object_on_its_line", f"Checking:\n{CALL}", [PARIS], "Checking:\n"),
    (
        "number_as_text",
        fenced(CALL.replace("}}", ', "days": "3"}}')),
        [("get_weather", {"city": "Paris", "days": "3"})],
        "",
    ),
    ("fence_left_open_with_complete_json", f"```json\n{CALL}\n", [PARIS], ""),
    ("undeclared_tool", NOT_DECLARED, [], NOT_DECLARED),
    ("json_answer_not_a_call", NOT_A_CALL, [], NOT_A_CALL),
    ("arguments_break_the_schema", WRONG_ARGUMENTS, [], WRONG_ARGUMENTS),
    ("object_inside_a_line", f"The call would be {CALL} here.", [], f"The call would be {CALL} here."),
    ("code_fence", CODE, [], CODE),
    ("truncated_bare_call", TRUNCATED, [], TRUNCATED),
    ("braces_in_strings", fenced(CALL.replace("Paris", "a}b{c")), [("get_weather", {"city": "a}b{c"})], ""),
    ("lone_backticks", "Use `` or ``` in markdown.\n``", [], "Use `` or ``` in markdown.\n``"),
]
IDS = [case[0] for case in CASES]
PARSERS = sorted(TOOL_PARSERS)


def _key(result: ParseResult) -> tuple[str, list[tuple[str, Any]], str | None]:
    return (
        result.content,
        [(c.function.name, json.loads(c.function.arguments)) for c in result.tool_calls],
        result.reasoning,
    )


def _streamed(text: str, parser_id: str, sizes: list[int]) -> tuple[ParseResult, str]:
    processor = StreamingProcessor(
        TOOL_PARSERS[parser_id](), ThinkTagParser(), tools_declared=True, json_calls=READER
    )
    events, at = [], 0
    for size in sizes:
        events += processor.feed(text[at : at + size])
        at += size
    events += processor.feed(text[at:])
    events += processor.finish()
    assert processor.result is not None
    return processor.result, "".join(e.text for e in events if e.kind == "content")


@pytest.mark.parametrize(("name", "text", "calls", "content"), CASES, ids=IDS)
def test_json_blocks_in_the_null_and_hermes_chains(
    name: str, text: str, calls: list[Any], content: str
) -> None:
    for parser_id in ("null", "hermes_json", "llama_xml", "mistral"):
        result = parse_output(
            text, TOOL_PARSERS[parser_id](), ThinkTagParser(), tools_declared=True, json_calls=READER
        )
        if name == "truncated_bare_call" and parser_id == "hermes_json":
            continue  # a reply opening with "{": hermes's own bare-call recovery reads it
        assert _key(result)[1] == calls, parser_id
        assert result.content == content, parser_id


@pytest.mark.parametrize("parser_id", PARSERS)
@settings(max_examples=20, deadline=None)
@given(data=st.data())
def test_every_format_streams_json_blocks_like_batch_at_any_split(parser_id: str, data: Any) -> None:
    for _, text, _, _ in CASES:
        batch = parse_output(
            text, TOOL_PARSERS[parser_id](), ThinkTagParser(), tools_declared=True, json_calls=READER
        )
        sizes = data.draw(st.lists(st.integers(1, 9), max_size=len(text)))
        result, content = _streamed(text, parser_id, sizes)
        assert _key(result) == _key(batch), (parser_id, text)
        assert content == result.content


@pytest.mark.parametrize("parser_id", PARSERS)
def test_a_fenced_call_is_a_call_in_every_format(parser_id: str) -> None:
    result = parse_output(
        CASES[0][1], TOOL_PARSERS[parser_id](), NullThinkingParser(), tools_declared=True, json_calls=READER
    )
    assert _key(result)[1] == [PARIS] and result.content == ""


def test_json_in_reasoning_is_reasoning() -> None:
    text = f"<think>\n```json\n{CALL}\n```\n</think>Done."
    result = parse_output(
        text, TOOL_PARSERS["hermes_json"](), ThinkTagParser(), tools_declared=True, json_calls=READER
    )
    assert result.tool_calls == [] and "get_weather" in (result.reasoning or "") and result.content == "Done."


def test_a_block_that_never_closes_is_content_after_the_bound_streamed_or_not() -> None:
    text = "Data:\n{" + '"k": 1, ' * (MAX_BLOCK_CHARS // 8) + "\nmore"
    batch = parse_output(
        text, TOOL_PARSERS["null"](), NullThinkingParser(), tools_declared=True, json_calls=READER
    )
    assert batch.content == text
    processor = StreamingProcessor(
        TOOL_PARSERS["null"](), NullThinkingParser(), tools_declared=True, json_calls=READER
    )
    streamed = "".join(e.text for i in range(0, len(text), 7) for e in processor.feed(text[i : i + 7]))
    assert len(streamed) > MAX_BLOCK_CHARS  # released once the bound passed, before the end
    streamed += "".join(e.text for e in processor.finish())
    assert streamed == text


def _corpus() -> list[tuple[str, Any]]:
    cases = []
    for parser_id in PARSERS:
        if parser_id != "null":
            module = importlib.import_module(f"tests.mlx_server.parsers.corpus.{parser_id}")
            cases += [(parser_id, case) for case in module.CASES if case.tools]
    return cases


def test_the_outside_corpus_keeps_its_results_with_json_calls_on() -> None:
    """Every corpus case with tools declared: the same calls and content with the recovery on
    (its tools declared with any arguments allowed) as without."""
    checked = 0
    for parser_id, case in _corpus():
        tools = [
            {"type": "function", "function": {"name": n, "parameters": {"type": "object"}}}
            for n in case.tools
        ]
        without = parse_output(
            case.text, TOOL_PARSERS[parser_id](), NullThinkingParser(), tools_declared=True
        )
        with_json = parse_output(
            case.text,
            TOOL_PARSERS[parser_id](),
            NullThinkingParser(),
            tools_declared=True,
            json_calls=JsonCallReader(chat_tools(tools) or ()),
        )
        assert _key(with_json) == _key(without), (parser_id, case.name)
        checked += 1
    assert checked >= 25
