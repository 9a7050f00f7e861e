"""Hermes JSON, GLM (native, 4.7, XML), Qwen3-Coder and MiniMax-M2 parsers against their corpora.

Besides one-piece extraction, every case is also cut into stream segments the way the
StreamingProcessor does (base.py's module docstring; a segment that holds no call goes back as
content without its markers) to check that segment-wise extraction gives the same calls and that
the corpus `content` is what is left.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft202012Validator

from mlx_server.parsers.grammar.parameters import SPACE_CLASS
from mlx_server.parsers.lenient_json import decode_value, encode_value, loads_lenient
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
from tests.mlx_server.parsers.grammar_support import TOOLS, accepts, random_outputs, smollm_grammar_tokenizer

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


@pytest.mark.parametrize(
    ("raw", "value"),
    [
        ("Paris", "Paris"),
        ("42", 42),
        ("-1.5e3", -1500.0),
        ("true", True),
        ("null", None),
        ('"42"', "42"),
        ('{"a": [1, 2]}', {"a": [1, 2]}),
        ("{'a': 1,}", {"a": 1}),
        ("[1, 2,]", [1, 2]),
        ("[WIP] fix the build", "[WIP] fix the build"),
        ("02134", "02134"),
        ("NaN", "NaN"),
        ("True", "True"),
        ("", ""),
        ("  spaced  ", "  spaced  "),
    ],
)
def test_decode_value(raw: str, value: Any) -> None:
    assert decode_value(raw) == value
    assert decode_value(encode_value(value)) == value


def test_lenient_json_never_yields_non_finite_numbers() -> None:
    assert loads_lenient('{"a": NaN, "b": [Infinity]}') == {"a": None, "b": [None]}
    assert loads_lenient("just prose, no JSON here") is None
    assert loads_lenient('```json\n{"a": 1}\n```') == {"a": 1}


# --- Call grammars of the tagged-parameter formats (the generic checks: test_call_grammars.py) ---

TAGGED = ["glm4_native", "glm47", "qwen3_coder", "minimax_m2"]


def tool(name: str, parameters: dict[str, Any]) -> dict[str, Any]:
    return {"type": "function", "function": {"name": name, "parameters": parameters}}


VALUES_TOOL = tool(
    "note",
    {
        "type": "object",
        "properties": {
            "text": {"type": "string"},
            "short": {"type": "string", "maxLength": 20},
            "maybe": {"type": ["string", "integer", "null"]},
            "anything": {},
        },
        "additionalProperties": False,
    },
)
# Strings whose raw form is easy to misread: JSON-looking, padded, empty, unicode whitespace.
TRICKY = [
    "Paris",
    "  padded ",
    "line\n",
    "3rd street",
    "3",
    "-1.5e3",
    "02134",
    "true",
    "true story",
    "null",
    "nullable",
    "[WIP] fix",
    "[1, 2]",
    '{"a": 1}',
    '"quoted"',
    '"half',
    "",
    " ",
    "x\u2028",
    "\x1c3",
    "a < b",
    "</b>",
    "Уфа 北京",
]


def test_space_class_is_what_strip_removes() -> None:
    python_class = re.sub(r"\\x\{([0-9a-f]+)\}", lambda m: f"\\u{int(m.group(1), 16):04x}", SPACE_CLASS)
    space = re.compile(f"[{python_class}]")
    assert all(bool(space.fullmatch(chr(code))) == chr(code).isspace() for code in range(0x110000))


@pytest.mark.parametrize("parser_id", TAGGED)
def test_grammar_accepts_every_string_its_parser_reads_back(smollm_dir: Path, parser_id: str) -> None:
    parser = PARSERS[parser_id]
    tokenizer = smollm_grammar_tokenizer(str(smollm_dir))
    grammar = parser.call_grammar([VALUES_TOOL], parallel=False)
    assert grammar is not None
    for value in TRICKY:
        for key in ("text", "maybe"):
            text = parser.render_calls([make_tool_call("note", {key: value})])
            assert as_pairs(parser.extract(text)) == [("note", {key: value})]
            assert accepts(tokenizer, grammar, text), text
        for key in ("short", "anything"):
            # Bounded strings hold no "<" (JSON writes it as \u003c); untyped values no raw
            # strings starting with "[" or "{" (they start JSON): both read back as JSON strings.
            raw = encode_value(value) == value
            if raw and ("<" in value if key == "short" else value.startswith(("[", "{"))):
                spelled = json.dumps(value).replace("<", "\\u003c")
                refused = parser.render_calls([make_tool_call("note", {key: value})])
                assert not accepts(tokenizer, grammar, refused), refused
                text = refused.replace(encode_value(value), spelled, 1)
            else:
                text = parser.render_calls([make_tool_call("note", {key: value})])
            assert as_pairs(parser.extract(text)) == [("note", {key: value})]
            assert accepts(tokenizer, grammar, text), text


@pytest.mark.parametrize("parser_id", TAGGED)
def test_grammar_keeps_tags_out_of_raw_values(smollm_dir: Path, parser_id: str) -> None:
    parser = PARSERS[parser_id]
    tokenizer = smollm_grammar_tokenizer(str(smollm_dir))
    grammar = parser.call_grammar([VALUES_TOOL], parallel=False)
    assert grammar is not None
    for tag in ("</arg_value>", "<arg_key>", "</parameter>", "<parameter=", "<parameter ", "</tool_call>"):
        text = parser.render_calls([make_tool_call("note", {"text": f"a{tag}b"})])
        if as_pairs(parser.extract(text)) != [("note", {"text": f"a{tag}b"})]:
            assert not accepts(tokenizer, grammar, text), text


EXOTIC_TOOLS = [
    # Beyond named parameters: written as one JSON object.
    tool(
        "pick",
        {
            "anyOf": [
                {
                    "type": "object",
                    "properties": {"a": {"type": "string", "maxLength": 6}},
                    "required": ["a"],
                    "additionalProperties": False,
                },
                {
                    "type": "object",
                    "properties": {"b": {"type": "integer"}},
                    "required": ["b"],
                    "additionalProperties": False,
                },
            ]
        },
    ),
    # Extra parameters allowed, $refs into $defs, enum and const, booleans and numbers.
    tool(
        "tag",
        {
            "type": "object",
            "properties": {
                "at": {"$ref": "#/$defs/point"},
                "color": {"enum": ["red", "dark blue", 7, None]},
                "kind": {"const": "pin"},
                "flag": {"type": ["boolean", "number"]},
            },
            "required": ["at"],
            "additionalProperties": {"type": "integer", "minimum": 0, "maximum": 9},
            "$defs": {
                "point": {
                    "type": "object",
                    "properties": {"x": {"type": "integer", "minimum": 0, "maximum": 9}},
                    "required": ["x"],
                    "additionalProperties": False,
                }
            },
        },
    ),
]


@pytest.mark.parametrize("parser_id", TAGGED)
def test_grammar_enum_const_refs_and_extra_parameters(smollm_dir: Path, parser_id: str) -> None:
    parser = PARSERS[parser_id]
    tokenizer = smollm_grammar_tokenizer(str(smollm_dir))
    grammar = parser.call_grammar(EXOTIC_TOOLS, parallel=False)
    assert grammar is not None
    good: dict[str, Any] = {"at": {"x": 3}, "color": "dark blue", "kind": "pin", "flag": 2.5, "n": 4}
    for arguments in (good, {**good, "color": 7}, {**good, "color": None, "flag": True}, {"at": {"x": 0}}):
        assert accepts(tokenizer, grammar, parser.render_calls([make_tool_call("tag", arguments)]))
    for wrong in ({"color": "green"}, {"kind": "pan"}, {"n": 12}, {"at": {"x": 10}}, {"flag": "yes"}):
        text = parser.render_calls([make_tool_call("tag", {**good, **wrong})])
        assert not accepts(tokenizer, grammar, text), text


@pytest.mark.parametrize("parser_id", TAGGED)
@pytest.mark.parametrize("parallel", [False, True])
def test_grammar_for_schemas_beyond_simple_parameters(
    smollm_dir: Path, parser_id: str, parallel: bool
) -> None:
    parser = PARSERS[parser_id]
    tokenizer = smollm_grammar_tokenizer(str(smollm_dir))
    schemas = {t["function"]["name"]: t["function"]["parameters"] for t in EXOTIC_TOOLS}
    names_seen = set()
    for text in random_outputs(parser, EXOTIC_TOOLS, tokenizer, parallel=parallel, count=16, seed=3):
        calls = parser.extract(text)
        assert calls, text
        assert parallel or len(calls) == 1, text
        for call in calls:
            names_seen.add(call.function.name)
            errors = list(
                Draft202012Validator(schemas[call.function.name]).iter_errors(
                    json.loads(call.function.arguments)
                )
            )
            assert not errors, f"{text!r}: {errors[0].message}"
    assert names_seen == set(schemas)


# Tags that the real models' tokenizers have as added tokens (GLM-4.5: all six; Qwen3-Coder and
# GLM-4 XML: the <tool_call> pair; MiniMax-M2: its block tags): the server binds them in the
# grammar (services/constraints.py `specialize`) and the model writes each as one token.
ADDED_TAGS = {
    "glm4_native": ["<tool_call>", "</tool_call>", "<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>"],
    "glm47": ["<tool_call>", "</tool_call>", "<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>"],
    "glm4_xml": ["<tool_call>", "</tool_call>"],
    "qwen3_coder": ["<tool_call>", "</tool_call>"],
    "minimax_m2": ["<minimax:tool_call>", "</minimax:tool_call>"],
}


@pytest.mark.parametrize("parser_id", sorted(ADDED_TAGS))
def test_grammar_with_tags_bound_to_added_tokens(smollm_dir: Path, parser_id: str) -> None:
    import random

    import numpy as np
    from llguidance import LLMatcher
    from llguidance.hf import from_tokenizer
    from transformers import AutoTokenizer

    from mlx_server.services.pipeline.constraints import lark_grammar, special_tokens_of, specialize

    hf: Any = AutoTokenizer.from_pretrained(str(smollm_dir))
    hf.add_tokens(ADDED_TAGS[parser_id], special_tokens=True)
    tokenizer = from_tokenizer(hf)
    parser = PARSERS[parser_id]
    tools = [VALUES_TOOL, *EXOTIC_TOOLS]
    lark = parser.call_grammar(tools, parallel=True)
    assert lark is not None
    grammar = lark_grammar(specialize(lark, special_tokens_of(hf)))

    def fits(ids: list[int]) -> bool:
        walk = LLMatcher(tokenizer, grammar, log_level=0)
        assert not walk.is_error(), walk.get_error()
        return walk.validate_tokens(ids) == len(ids) and walk.consume_tokens(ids) and walk.is_accepting()

    for value in ("Paris", "3", "a < b", "x\n"):
        text = parser.render_calls([make_tool_call("note", {"text": value, "maybe": value})])
        ids = hf.encode(text, add_special_tokens=False)
        assert hf.convert_tokens_to_ids(ADDED_TAGS[parser_id][0]) in ids  # a tag is one token here
        assert fits(ids), text

    # Random walks (values short enough to end within the budget).
    tools = [*TOOLS["one tool"], *TOOLS["three tools"], *EXOTIC_TOOLS]
    lark = parser.call_grammar(tools, parallel=True)
    assert lark is not None
    grammar = lark_grammar(specialize(lark, special_tokens_of(hf)))
    schemas = {t["function"]["name"]: t["function"]["parameters"] for t in tools}
    rng = random.Random(5)
    for _ in range(8):
        walk = LLMatcher(tokenizer, grammar, log_level=0)
        tokens: list[int] = []
        while not walk.is_stopped() and len(tokens) < 300:
            mask = np.unpackbits(np.frombuffer(walk.compute_bitmask(), dtype=np.uint8), bitorder="little")
            allowed = [int(t) for t in np.flatnonzero(mask[: len(hf)]) if t != tokenizer.eos_token]
            if walk.is_accepting() and (not allowed or rng.random() < 0.6):
                break
            tokens.append(rng.choice(allowed))
            assert walk.consume_token(tokens[-1]), walk.get_error()
        assert walk.is_accepting(), hf.decode(tokens)
        text = hf.decode(tokens)
        calls = parser.extract(text)
        assert calls, text
        for call in calls:
            arguments = json.loads(call.function.arguments)
            assert Draft202012Validator(schemas[call.function.name]).is_valid(arguments), text
