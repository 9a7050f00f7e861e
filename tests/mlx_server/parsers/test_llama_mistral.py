"""The Llama, Mistral, pythonic and Gemma tool-call parsers against their corpora."""

from __future__ import annotations

import importlib
import json
from typing import Any

import pytest

from mlx_server.parsers.base import ToolCallParser, make_tool_call
from mlx_server.parsers.gemma import Gemma4Parser
from mlx_server.parsers.llama import LlamaPythonParser, LlamaXmlParser
from mlx_server.parsers.mistral import MistralParser
from mlx_server.parsers.pythonic import PythonicParser
from mlx_server.schemas.openai import ToolCall
from tests.mlx_server.parsers.corpus import ParserCase

PARSERS: dict[str, ToolCallParser] = {
    "llama_xml": LlamaXmlParser(),
    "llama_python": LlamaPythonParser(),
    "mistral": MistralParser(),
    "pythonic": PythonicParser(),
    "gemma4": Gemma4Parser(),
}
MIN_CASES = {"llama_xml": 15, "llama_python": 8, "mistral": 15, "pythonic": 8, "gemma4": 8}


def corpus(parser_id: str) -> list[ParserCase]:
    cases: list[ParserCase] = importlib.import_module(f"tests.mlx_server.parsers.corpus.{parser_id}").CASES
    return cases


ALL_CASES = [
    pytest.param(parser_id, case, id=f"{parser_id}-{case.name}")
    for parser_id in PARSERS
    for case in corpus(parser_id)
]
CASES_WITH_CALLS = [
    pytest.param(parser_id, case, id=f"{parser_id}-{case.name}")
    for parser_id in PARSERS
    for case in corpus(parser_id)
    if case.calls
]


def named_args(calls: list[ToolCall]) -> list[tuple[str, Any]]:
    return [(call.function.name, json.loads(call.function.arguments)) for call in calls]


def calls_of(pairs: list[tuple[str, Any]]) -> list[ToolCall]:
    return [make_tool_call(name, arguments) for name, arguments in pairs]


@pytest.mark.parametrize("parser_id", PARSERS)
def test_corpus_is_large_enough_and_names_are_unique(parser_id: str) -> None:
    cases = corpus(parser_id)
    assert len(cases) >= MIN_CASES[parser_id]
    assert len({case.name for case in cases}) == len(cases)
    assert any(not case.calls for case in cases) and any(len(case.calls) > 1 for case in cases)


@pytest.mark.parametrize(("parser_id", "case"), ALL_CASES)
def test_extract_gives_the_expected_calls(parser_id: str, case: ParserCase) -> None:
    calls = PARSERS[parser_id].extract(case.text)
    assert named_args(calls) == [(name, arguments) for name, arguments in case.calls]
    ids = [call.id for call in calls]
    assert len(set(ids)) == len(ids)
    assert all(call_id.startswith("call_") for call_id in ids)


@pytest.mark.parametrize(("parser_id", "case"), CASES_WITH_CALLS)
def test_rendered_calls_extract_back_unchanged(parser_id: str, case: ParserCase) -> None:
    parser = PARSERS[parser_id]
    calls = parser.extract(case.text)
    assert named_args(parser.extract(parser.render_calls(calls))) == named_args(calls)


TRICKY_ARGUMENTS: dict[str, Any] = {
    "text": 'He said "hi",\nthen {left} [fast] \\ back',
    "city": "Zürich",
    "note": "東京 🌸",
    "count": 0,
    "ratio": -2.5,
    "flags": [True, False, None],
    "nested": {"deep": {"list": [1, {"k": "v"}]}, "empty": {}},
    "number_text": "42",
}


@pytest.mark.parametrize("parser_id", PARSERS)
def test_render_round_trip_keeps_tricky_values_and_order(parser_id: str) -> None:
    parser = PARSERS[parser_id]
    pairs: list[tuple[str, Any]] = [
        ("send_message", TRICKY_ARGUMENTS),
        ("get_time", {}),
        ("get_weather", {"city": "Paris"}),
    ]
    assert named_args(parser.extract(parser.render_calls(calls_of(pairs)))) == pairs


@pytest.mark.parametrize("parser_id", PARSERS)
def test_nothing_rendered_and_nothing_extracted_from_empty_text(parser_id: str) -> None:
    parser = PARSERS[parser_id]
    assert parser.render_calls([]) == ""
    assert parser.extract("") == []
    assert parser.extract("   \n") == []


def test_markers_are_the_models_spellings() -> None:
    assert PARSERS["llama_xml"].stream_markers == [
        ("<function=", "</function>"),
        ("<|python_tag|>", "<|eom_id|>"),
    ]
    assert PARSERS["llama_xml"].leading_markers == ["{"]
    assert PARSERS["llama_python"].stream_markers == [("<|python_tag|>", "<|eom_id|>")]
    assert PARSERS["mistral"].stream_markers == [("[TOOL_CALLS]", "")]
    assert PARSERS["pythonic"].stream_markers == [("<|python_start|>", "<|python_end|>")]
    assert PARSERS["pythonic"].leading_markers == ["["]
    assert PARSERS["gemma4"].stream_markers == [("<|tool_call>", "<tool_call|>"), ("```tool_code", "```")]


def test_parsers_keep_no_per_request_state() -> None:
    for parser in PARSERS.values():
        parser.extract('[TOOL_CALLS]get_weather[ARGS]{"city": "Paris"}<function=x>{}</function>')
        assert vars(parser) == {}


def test_llama_xml_takes_bare_json_only_where_the_reply_starts() -> None:
    parser = PARSERS["llama_xml"]
    call = '{"name": "get_weather", "parameters": {"city": "Paris"}}'
    assert named_args(parser.extract(call)) == [("get_weather", {"city": "Paris"})]
    assert parser.extract(f"For example: {call}") == []


def test_llama_xml_reads_a_fenced_json_reply_given_whole() -> None:
    # Not a leading marker (a reply opening with a fence is usually code), but the probe and any
    # caller holding the whole output get the call.
    text = '```json\n{"name": "get_weather", "parameters": {"city": "Paris"}}\n```'
    assert named_args(PARSERS["llama_xml"].extract(text)) == [("get_weather", {"city": "Paris"})]


def test_llama_renders_custom_tools_as_function_tags() -> None:
    rendered = PARSERS["llama_xml"].render_calls(calls_of([("get_weather", {"city": "Paris"})]))
    assert rendered == '<function=get_weather>{"city": "Paris"}</function>'


def test_llama_python_renders_builtins_code_and_custom_tools_as_llama_writes_them() -> None:
    parser = PARSERS["llama_python"]
    pairs: list[tuple[str, Any]] = [
        ("brave_search", {"query": "MLX"}),
        ("code_interpreter", {"code": "print(1 + 1)"}),
        ("get_weather", {"city": "Paris"}),
    ]
    assert parser.render_calls(calls_of(pairs)) == (
        '<|python_tag|>brave_search.call(query="MLX")<|eom_id|>'
        "<|python_tag|>print(1 + 1)<|eom_id|>"
        '<|python_tag|>{"name": "get_weather", "parameters": {"city": "Paris"}}<|eom_id|>'
    )


def test_llama_python_sends_library_calls_to_code_interpreter() -> None:
    calls = PARSERS["llama_python"].extract("<|python_tag|>math.sqrt(x=2)<|eom_id|>")
    assert named_args(calls) == [("code_interpreter", {"code": "math.sqrt(x=2)"})]


@pytest.mark.parametrize(
    "text",
    [
        '[TOOL_CALLS] Sure, calling it now: [{"name": "get_weather", "arguments": {"city": "Paris"}}]',
        '[TOOL_CALLS]get_weather (see [docs]): [{"name": "get_weather", "arguments": {"city": "Paris"}}]',
        '[TOOL_CALLS]I will check.\n[{"name": "get_weather", "arguments": {"city": "Paris"}}]</s>',
    ],
)
def test_mistral_finds_a_call_array_after_stray_text(text: str) -> None:
    calls = PARSERS["mistral"].extract(text)
    assert [(c.function.name, json.loads(c.function.arguments)) for c in calls] == [
        ("get_weather", {"city": "Paris"})
    ]


def test_mistral_stray_text_without_a_call_array_is_no_call() -> None:
    parser = PARSERS["mistral"]
    assert parser.extract("[TOOL_CALLS]I cannot do that [sorry], see [1].") == []
    assert parser.extract('[TOOL_CALLS]Example: [{"name": "Ada", "age": 36}]') == []


def test_mistral_renders_the_v11_form() -> None:
    rendered = PARSERS["mistral"].render_calls(calls_of([("a", {"x": 1}), ("b", {})]))
    assert rendered == '[TOOL_CALLS]a[ARGS]{"x": 1}[TOOL_CALLS]b[ARGS]{}'


def test_gemma4_renders_native_tokens() -> None:
    rendered = PARSERS["gemma4"].render_calls(
        calls_of([("get_weather", {"city": "Paris", "days": 3, "ok": True, "tags": ["a"]})])
    )
    assert (
        rendered
        == '<|tool_call>call:get_weather{city:<|"|>Paris<|"|>,days:3,ok:true,tags:[<|"|>a<|"|>]}<tool_call|>'
    )


Q = '<|"|>'


@pytest.mark.parametrize(
    ("parser_id", "text", "expected"),
    [
        (
            "llama_xml",
            '<function=f>{"a": "</function><function=g>{}</function>"}</function>',
            [("f", {"a": "</function><function=g>{}</function>"})],
        ),
        (
            "llama_xml",
            '<function=f>{"a": "<|python_tag|>g(x=1)<|eom_id|>"}</function>',
            [("f", {"a": "<|python_tag|>g(x=1)<|eom_id|>"})],
        ),
        (
            "llama_python",
            '<|python_tag|>{"name": "f", "parameters": {"a": "<|eom_id|>x<|python_tag|>"}}<|eom_id|>',
            [("f", {"a": "<|eom_id|>x<|python_tag|>"})],
        ),
        (
            "llama_python",
            '<|python_tag|>brave_search.call(query="a<|eom_id|>b")<|eom_id|>',
            [("brave_search", {"query": "a<|eom_id|>b"})],
        ),
        (
            "mistral",
            '[TOOL_CALLS]f[ARGS]{"a": "[TOOL_CALLS]g[ARGS]{}"}',
            [("f", {"a": "[TOOL_CALLS]g[ARGS]{}"})],
        ),
        (
            "pythonic",
            '[f(a="<|python_start|>[g()]<|python_end|>")]',
            [("f", {"a": "<|python_start|>[g()]<|python_end|>"})],
        ),
        (
            "gemma4",
            f"<|tool_call>call:f{{a:{Q}```tool_code\ng()\n```{Q}}}<tool_call|>",
            [("f", {"a": "```tool_code\ng()\n```"})],
        ),
        (
            "gemma4",
            '<|tool_call>{"name": "f", "arguments": {"a": "<tool_call|>call:g{}"}}<tool_call|>',
            [("f", {"a": "<tool_call|>call:g{}"})],
        ),
    ],
)
def test_call_markers_inside_a_string_stay_in_the_string(
    parser_id: str, text: str, expected: list[tuple[str, Any]]
) -> None:
    # What a constrained model may write: the grammars let string values hold any text.
    assert named_args(PARSERS[parser_id].extract(text)) == expected
