"""Hermes JSON, GLM (native, 4.7, XML), Qwen3-Coder and MiniMax-M2 parsers against their corpora.

Besides one-piece extraction, every case is also cut into stream segments the way the
StreamingProcessor does (base.py's module docstring; a segment that holds no call goes back as
content without its markers) to check that segment-wise extraction gives the same calls and that
the corpus `content` is what is left.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from mlx_server.parsers.base import ToolCallParser, make_tool_call
from mlx_server.parsers.glm import Glm4NativeParser, Glm4XmlParser, Glm47Parser
from mlx_server.parsers.hermes import HermesJsonParser
from mlx_server.parsers.minimax import MinimaxM2Parser
from mlx_server.parsers.qwen3_coder import Qwen3CoderParser
from mlx_server.schemas.openai import FunctionCall, ToolCall
from tests.mlx_server.parsers.corpus import (
    ParserCase,
    glm4_native,
    glm4_xml,
    glm47,
    hermes_json,
    minimax_m2,
    qwen3_coder,
)

PARSERS: dict[str, ToolCallParser] = {
    "hermes_json": HermesJsonParser(),
    "glm4_native": Glm4NativeParser(),
    "glm4_xml": Glm4XmlParser(),
    "glm47": Glm47Parser(),
    "qwen3_coder": Qwen3CoderParser(),
    "minimax_m2": MinimaxM2Parser(),
}
CORPORA: dict[str, list[ParserCase]] = {
    "hermes_json": hermes_json.CASES,
    "glm4_native": glm4_native.CASES,
    "glm4_xml": glm4_xml.CASES,
    "glm47": glm47.CASES,
    "qwen3_coder": qwen3_coder.CASES,
    "minimax_m2": minimax_m2.CASES,
}
MIN_CASES = {
    "hermes_json": 15,
    "glm4_native": 15,
    "glm4_xml": 8,
    "glm47": 8,
    "qwen3_coder": 15,
    "minimax_m2": 8,
}

ALL_CASES = [
    pytest.param(parser_id, case, id=f"{parser_id}-{case.name}")
    for parser_id, cases in CORPORA.items()
    for case in cases
]
CASES_WITH_CALLS = [param for param in ALL_CASES if param.values[1].calls]  # type: ignore[union-attr]


def as_pairs(calls: list[ToolCall]) -> list[tuple[str, Any]]:
    return [(call.function.name, json.loads(call.function.arguments)) for call in calls]


def stream(parser: ToolCallParser, text: str, tools: list[str] | None) -> tuple[list[ToolCall], str]:
    """Calls and content as the StreamingProcessor produces them."""
    if tools and text.lstrip().startswith(tuple(parser.leading_markers or ["\0"])):
        whole = parser.extract(text)
        return whole, "" if whole else text
    calls: list[ToolCall] = []
    content: list[str] = []
    pos = 0
    while True:
        starts = [(text.find(start, pos), start, end) for start, end in parser.stream_markers]
        starts = [found for found in starts if found[0] != -1]
        if not starts:
            content.append(text[pos:])
            return calls, "".join(content)
        at, start, end = min(starts, key=lambda found: found[0])
        content.append(text[pos:at])
        close = text.find(end, at + len(start)) if end else -1
        while close != -1 and parser.marker_inside_call(text[at + len(start) : close]):
            close = text.find(end, close + len(end))  # as the StreamingProcessor does
        stop = close + len(end) if close != -1 else len(text)
        segment_calls = parser.extract(text[at:stop])
        if segment_calls:
            calls.extend(segment_calls)
        else:  # given back without its markers
            content.append(text[at + len(start) : close if close != -1 else len(text)])
        pos = stop


@pytest.mark.parametrize(("parser_id", "case"), ALL_CASES)
def test_extract_matches_corpus(parser_id: str, case: ParserCase) -> None:
    calls = PARSERS[parser_id].extract(case.text)
    assert as_pairs(calls) == case.calls
    ids = [call.id for call in calls]
    assert len(set(ids)) == len(ids)
    assert all(call_id.startswith("call_") for call_id in ids)
    assert all(call.type == "function" for call in calls)


@pytest.mark.parametrize(("parser_id", "case"), ALL_CASES)
def test_stream_segments_give_same_calls_and_content(parser_id: str, case: ParserCase) -> None:
    calls, content = stream(PARSERS[parser_id], case.text, case.tools)
    assert as_pairs(calls) == case.calls
    if case.content is not None:
        assert content.strip() == case.content.strip()
        for marker in (m for pair in PARSERS[parser_id].stream_markers for m in pair if m):
            assert marker not in content


@pytest.mark.parametrize(("parser_id", "case"), CASES_WITH_CALLS)
def test_render_round_trip(parser_id: str, case: ParserCase) -> None:
    parser = PARSERS[parser_id]
    rendered = parser.render_calls(parser.extract(case.text))
    assert as_pairs(parser.extract(rendered)) == case.calls
    calls, content = stream(parser, rendered, None)
    assert as_pairs(calls) == case.calls
    assert content.strip() == ""


@pytest.mark.parametrize(("parser_id", "case"), ALL_CASES)
def test_truncated_output_never_raises(parser_id: str, case: ParserCase) -> None:
    """Every prefix is an output cut short: no exception, and arguments are always a JSON object."""
    parser = PARSERS[parser_id]
    for cut in range(len(case.text) + 1):
        for call in parser.extract(case.text[:cut]):
            assert call.function.name
            assert isinstance(json.loads(call.function.arguments), dict)


@pytest.mark.parametrize("parser_id", list(PARSERS))
def test_corpus_size_and_names(parser_id: str) -> None:
    cases = CORPORA[parser_id]
    assert len(cases) >= MIN_CASES[parser_id]
    assert len({case.name for case in cases}) == len(cases)
    assert PARSERS[parser_id].parser_id == parser_id


@pytest.mark.parametrize("parser_id", list(PARSERS))
def test_empty_input(parser_id: str) -> None:
    parser = PARSERS[parser_id]
    assert parser.extract("") == []
    assert parser.render_calls([]) == ""


@pytest.mark.parametrize("parser_id", list(PARSERS))
def test_round_trip_keeps_strings_that_look_like_json(parser_id: str) -> None:
    parser = PARSERS[parser_id]
    arguments = {"zip": "02134", "count": "3", "flag": "true", "quoted": '"x"', "pad": " a ", "nl": "\nb\n"}
    calls = parser.extract(parser.render_calls([make_tool_call("fill_form", arguments)]))
    assert as_pairs(calls) == [("fill_form", arguments)]


@pytest.mark.parametrize("parser_id", list(PARSERS))
def test_shared_instance_gives_fresh_ids(parser_id: str) -> None:
    parser = PARSERS[parser_id]
    text = parser.render_calls([make_tool_call("get_weather", {"city": "Paris"})])
    first, second = parser.extract(text), parser.extract(text)
    assert as_pairs(first) == as_pairs(second) == [("get_weather", {"city": "Paris"})]
    assert first[0].id != second[0].id


def test_validates_uses_extract() -> None:
    parser = PARSERS["qwen3_coder"]
    text = "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n</function>\n"
    assert parser.validates(text, "get_weather")
    assert not parser.validates(text, "get_time")


def test_markers() -> None:
    assert PARSERS["hermes_json"].stream_markers == [("<tool_call>", "</tool_call>")]
    assert PARSERS["hermes_json"].leading_markers == ["{", "["]
    for parser_id in ("glm4_native", "glm4_xml", "glm47"):
        assert PARSERS[parser_id].stream_markers == [("<tool_call>", "</tool_call>")]
        assert PARSERS[parser_id].leading_markers == []
    assert PARSERS["qwen3_coder"].stream_markers == [
        ("<tool_call>", "</tool_call>"),
        ("<function=", "</function>"),
    ]
    assert PARSERS["minimax_m2"].stream_markers == [("<minimax:tool_call>", "</minimax:tool_call>")]


WEATHER = make_tool_call("get_weather", {"city": "Paris", "days": 3})
TIME = make_tool_call("get_time", {})


def test_render_hermes_like_qwen_template() -> None:
    assert PARSERS["hermes_json"].render_calls([WEATHER, TIME]) == (
        '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "days": 3}}\n</tool_call>\n'
        '<tool_call>\n{"name": "get_time", "arguments": {}}\n</tool_call>'
    )


def test_render_glm45_like_its_template() -> None:
    assert PARSERS["glm4_native"].render_calls([WEATHER, TIME]) == (
        "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n"
        "<arg_key>days</arg_key>\n<arg_value>3</arg_value>\n</tool_call>\n"
        "<tool_call>get_time\n</tool_call>"
    )


def test_render_glm47_without_newlines() -> None:
    assert PARSERS["glm47"].render_calls([WEATHER, TIME]) == (
        "<tool_call>get_weather<arg_key>city</arg_key><arg_value>Paris</arg_value>"
        "<arg_key>days</arg_key><arg_value>3</arg_value></tool_call><tool_call>get_time</tool_call>"
    )


def test_render_glm4_xml() -> None:
    assert PARSERS["glm4_xml"].render_calls([WEATHER]) == (
        '<tool_call>\n<name>get_weather</name>\n<arguments>{"city": "Paris", "days": 3}</arguments>\n'
        "</tool_call>"
    )


def test_render_qwen3_coder_like_its_template() -> None:
    assert PARSERS["qwen3_coder"].render_calls([WEATHER, TIME]) == (
        "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n"
        "<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>\n"
        "<tool_call>\n<function=get_time>\n</function>\n</tool_call>"
    )


def test_render_minimax_one_block_for_all_calls() -> None:
    assert PARSERS["minimax_m2"].render_calls([WEATHER, TIME]) == (
        '<minimax:tool_call>\n<invoke name="get_weather">\n<parameter name="city">Paris</parameter>\n'
        '<parameter name="days">3</parameter>\n</invoke>\n<invoke name="get_time">\n</invoke>\n'
        "</minimax:tool_call>"
    )


def test_render_non_object_arguments_as_empty() -> None:
    broken = ToolCall(id="call_x", function=FunctionCall(name="get_time", arguments="not json"))
    for parser in PARSERS.values():
        assert as_pairs(parser.extract(parser.render_calls([broken]))) == [("get_time", {})]
