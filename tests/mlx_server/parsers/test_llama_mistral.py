"""The Llama, Mistral, pythonic and Gemma tool-call parsers against their corpora."""

from __future__ import annotations

import importlib
import json
import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator

from mlx_server.parsers.base import ToolCallParser, make_tool_call
from mlx_server.parsers.gemma import Gemma4Parser
from mlx_server.parsers.llama import LlamaPythonParser, LlamaXmlParser
from mlx_server.parsers.mistral import MistralParser
from mlx_server.parsers.pythonic import PythonicParser
from mlx_server.schemas.openai import ToolCall
from tests.mlx_server.parsers.corpus import ParserCase
from tests.mlx_server.parsers.grammar_support import accepts, random_outputs, smollm_grammar_tokenizer

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


@pytest.mark.parametrize(
    "text",
    [
        '[__import__("os").system("touch /tmp/pwned")]',
        '[get_weather(city=__import__("os").getcwd())]',
        "[get_weather(city=open('/etc/passwd').read())]",
        "[get_weather(**kwargs)]",
        "[get_weather(city=1 + 2j)]",
    ],
)
def test_pythonic_reads_literals_only_and_never_evaluates(text: str) -> None:
    assert PARSERS["pythonic"].extract(text) == []


def test_pythonic_keeps_keys_that_are_not_identifiers() -> None:
    parser = PARSERS["pythonic"]
    calls = calls_of([("set", {"content-type": "json", "class": 1, "ok": True})])
    rendered = parser.render_calls(calls)
    assert rendered == '[set(ok=True, **{"content-type": "json", "class": 1})]'
    assert named_args(parser.extract(rendered)) == [("set", {"ok": True, "content-type": "json", "class": 1})]


def test_gemma4_renders_native_tokens() -> None:
    rendered = PARSERS["gemma4"].render_calls(
        calls_of([("get_weather", {"city": "Paris", "days": 3, "ok": True, "tags": ["a"]})])
    )
    assert (
        rendered
        == '<|tool_call>call:get_weather{city:<|"|>Paris<|"|>,days:3,ok:true,tags:[<|"|>a<|"|>]}<tool_call|>'
    )


FRAGMENTS = [
    "<function=",
    "get_weather>",
    "</function>",
    "<|python_tag|>",
    "<|eom_id|>",
    "[TOOL_CALLS]",
    "[ARGS]",
    "[CALL_ID]",
    "<|python_start|>",
    "<|python_end|>",
    "<|tool_call>",
    "<tool_call|>",
    "call:f{",
    '<|"|>',
    "```tool_code\n",
    "```",
    "brave_search.call(query=",
    '{"name": "f", "arguments": ',
    '{"a": [1, {"b": "c"}]}',
    "[g(x=1), ",
    "(",
    ")",
    "[",
    "]",
    "{",
    "}",
    ":",
    ",",
    '"',
    "'",
    "\\",
    "\n",
    "Zürich 🌸",
]


@settings(max_examples=300, deadline=None)
@given(pieces=st.lists(st.one_of(st.sampled_from(FRAGMENTS), st.text(max_size=8)), max_size=16))
def test_extract_never_raises_on_arbitrary_fragments(pieces: list[str]) -> None:
    text = "".join(pieces)
    for parser in PARSERS.values():
        for call in parser.extract(text):
            assert call.function.name
            assert isinstance(json.loads(call.function.arguments), dict)


@pytest.mark.parametrize("parser_id", PARSERS)
def test_deep_nesting_is_not_a_crash(parser_id: str) -> None:
    depth = 5000
    nested = "[" * depth + "]" * depth
    for text in (
        f'<function=f>{{"a": {nested}}}</function>',
        f'[TOOL_CALLS]f[ARGS]{{"a": {nested}}}',
        f"[f(a={nested})]",
        f"<|python_tag|>f(a={nested})",
        f"<|tool_call>call:f{{a:{nested}}}<tool_call|>",
        "<|tool_call>call:f{a:" + "{a:" * depth,
    ):
        PARSERS[parser_id].extract(text)


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


def _tool(name: str, parameters: dict[str, Any]) -> dict[str, Any]:
    return {"type": "function", "function": {"name": name, "parameters": parameters}}


# Schemas beyond the generic grammar test's: keys that are not identifiers, a pydantic-style
# $ref with an Optional field, mixed enums, tuple items (a fallback), a recursive $ref.
AWKWARD_TOOLS = [
    _tool(
        "set_header",
        {
            "type": "object",
            "properties": {
                "content-type": {"type": "string", "maxLength": 6},
                "class": {"type": "integer", "minimum": 0, "maximum": 9},
                "ok": {"type": "boolean"},
            },
            "required": ["content-type"],
            "additionalProperties": False,
        },
    ),
    _tool(
        "create_user",
        {
            "$defs": {
                "Address": {
                    "type": "object",
                    "properties": {
                        "street": {"type": "string", "maxLength": 6},
                        "zip": {
                            "anyOf": [{"type": "string", "maxLength": 5}, {"type": "null"}],
                            "default": None,
                        },
                    },
                    "required": ["street"],
                    "additionalProperties": False,
                }
            },
            "type": "object",
            "properties": {
                "address": {"$ref": "#/$defs/Address"},
                "tags": {"type": "array", "items": {"enum": ["a", 1, True, None]}, "maxItems": 3},
                "ratio": {"type": ["number", "null"], "exclusiveMinimum": 0, "maximum": 1},
            },
            "required": ["address"],
            "additionalProperties": False,
        },
    ),
    _tool(
        "pair_up",
        {
            "type": "object",
            "properties": {
                "pair": {"type": "array", "prefixItems": [{"const": 1}, {"const": "x"}], "items": False}
            },
            "required": ["pair"],
            "additionalProperties": False,
        },
    ),
    _tool(
        "tree",
        {
            "$defs": {
                "Node": {
                    "type": "object",
                    "properties": {
                        "v": {"type": "integer", "minimum": 0, "maximum": 5},
                        "kids": {"type": "array", "items": {"$ref": "#/$defs/Node"}, "maxItems": 2},
                    },
                    "required": ["v"],
                    "additionalProperties": False,
                }
            },
            "$ref": "#/$defs/Node",
        },
    ),
]
# Calls every format writes the way its grammar does. (Gemma writes pair_up, and Gemma and
# pythonic write tree, as JSON under constraint: tuple items and recursion are their fallbacks.)
AWKWARD_CALLS: list[tuple[str, Any]] = [
    ("set_header", {"content-type": "json", "class": 1, "ok": True}),
    ("set_header", {"content-type": ""}),
    ("create_user", {"address": {"street": "Main", "zip": None}, "tags": ["a", 1, None], "ratio": 0.5}),
    ("create_user", {"address": {"street": "Main"}}),
]


@pytest.mark.parametrize("parser_id", PARSERS)
def test_grammars_take_awkward_schemas_exactly(smollm_dir: Path, parser_id: str) -> None:
    parser = PARSERS[parser_id]
    tokenizer = smollm_grammar_tokenizer(str(smollm_dir))
    grammar = parser.call_grammar(AWKWARD_TOOLS, parallel=True)
    assert grammar is not None
    schemas = {tool["function"]["name"]: tool["function"]["parameters"] for tool in AWKWARD_TOOLS}
    for text in random_outputs(parser, AWKWARD_TOOLS, tokenizer, parallel=True, count=8, seed=3):
        calls = parser.extract(text)
        assert calls, text
        for call in calls:
            arguments = json.loads(call.function.arguments)
            assert not list(Draft202012Validator(schemas[call.function.name]).iter_errors(arguments)), text
    for name, arguments in AWKWARD_CALLS:
        rendered = parser.render_calls(calls_of([(name, arguments)]))
        assert accepts(tokenizer, grammar, rendered), rendered
    bad = parser.render_calls(calls_of([("set_header", {"content-type": "far too long"})]))
    assert not accepts(tokenizer, grammar, bad)


def test_grammars_write_python_literals_and_gemma_tokens(smollm_dir: Path) -> None:
    tokenizer = smollm_grammar_tokenizer(str(smollm_dir))
    tools = AWKWARD_TOOLS[:1]
    pythonic = PARSERS["pythonic"].call_grammar(tools, parallel=False)
    gemma = PARSERS["gemma4"].call_grammar(tools, parallel=False)
    assert pythonic is not None and gemma is not None
    assert accepts(tokenizer, pythonic, '[set_header(ok=True, **{"content-type": "json"})]')
    assert not accepts(tokenizer, pythonic, '[set_header(ok=true, **{"content-type": "json"})]')
    assert not accepts(tokenizer, pythonic, "[set_header(**{'content-type': 'json'})]")
    assert accepts(
        tokenizer, gemma, f"<|tool_call>call:set_header{{content-type:{Q}json{Q},ok:true}}<tool_call|>"
    )
    # Gemma strings cannot hold the call tokens: the parser would end the call there.
    assert not accepts(
        tokenizer, gemma, f"<|tool_call>call:set_header{{content-type:{Q}<tool_call|>{Q}}}<tool_call|>"
    )


def test_llama_python_grammar_takes_the_builtin_call_form(smollm_dir: Path) -> None:
    tokenizer = smollm_grammar_tokenizer(str(smollm_dir))
    parser = PARSERS["llama_python"]
    search = _tool(
        "brave_search", {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}
    )
    grammar = parser.call_grammar([search], parallel=False)
    assert grammar is not None
    rendered = parser.render_calls(calls_of([("brave_search", {"query": 'say "hi"'})]))
    assert rendered == '<|python_tag|>brave_search.call(query="say \\"hi\\"")<|eom_id|>'
    assert accepts(tokenizer, grammar, rendered)
    assert accepts(tokenizer, grammar, '<|python_tag|>{"name": "brave_search", "parameters": {"query": "x"}}')


def test_formats_leave_out_tools_whose_names_they_cannot_write() -> None:
    tools = [_tool("3d-render", {"type": "object"})]
    assert PARSERS["llama_xml"].call_grammar(tools, parallel=False) is None
    assert PARSERS["mistral"].call_grammar(tools, parallel=False) is None
    assert PARSERS["pythonic"].call_grammar(tools, parallel=False) is None
    # Gemma and llama_python fall back to a JSON call object, which carries any name.
    assert '"const": "3d-render"' in (PARSERS["gemma4"].call_grammar(tools, parallel=False) or "")
    assert '"const": "3d-render"' in (PARSERS["llama_python"].call_grammar(tools, parallel=False) or "")


@pytest.mark.parametrize("parser_id", PARSERS)
def test_grammars_hold_when_markers_are_the_models_added_tokens(smollm_dir: Path, parser_id: str) -> None:
    # The service binds quoted literals that are added tokens to those tokens (specialize); the
    # grammars must still compile, and every walk still parse, when that happens.
    from llguidance import LLMatcher
    from llguidance.hf import from_tokenizer
    from transformers import AutoTokenizer

    from mlx_server.services.pipeline.constraints import special_tokens_of, specialize

    hf: Any = AutoTokenizer.from_pretrained(str(smollm_dir))
    markers = [
        '<|"|>',
        "<|tool_call>",
        "<tool_call|>",
        "<|python_tag|>",
        "<|eom_id|>",
        "[TOOL_CALLS]",
        "[ARGS]",
    ]
    hf.add_special_tokens({"additional_special_tokens": markers})
    tokenizer = from_tokenizer(hf)
    parser, tools = PARSERS[parser_id], AWKWARD_TOOLS[:2]
    grammar = specialize(parser.call_grammar(tools, parallel=True) or "", special_tokens_of(hf))
    schemas = {tool["function"]["name"]: tool["function"]["parameters"] for tool in tools}
    rng = random.Random(11)
    for _ in range(8):
        walk = LLMatcher(tokenizer, grammar, log_level=0)
        assert not walk.is_error(), walk.get_error()
        tokens: list[int] = []
        while not walk.is_accepting() or rng.random() < 0.4:
            bits = np.unpackbits(np.frombuffer(walk.compute_bitmask(), dtype=np.uint8), bitorder="little")
            allowed = [
                int(t) for t in np.flatnonzero(bits) if t < tokenizer.vocab_size and t != tokenizer.eos_token
            ]
            if not allowed or len(tokens) > 1000:
                break
            tokens.append(rng.choice(allowed))
            assert walk.consume_token(tokens[-1]), walk.get_error()
        assert walk.is_accepting()
        text = hf.decode(tokens, skip_special_tokens=False)
        calls = parser.extract(text)
        assert calls, text
        for call in calls:
            arguments = json.loads(call.function.arguments)
            assert not list(Draft202012Validator(schemas[call.function.name]).iter_errors(arguments)), text
