"""Call grammars of the tagged-parameter formats (grammar/parameters.py): GLM, Qwen3-Coder and
MiniMax values written raw or as JSON, tags kept out of raw text, added tokens bound."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft202012Validator

from mlx_server.parsers.base import make_tool_call
from mlx_server.parsers.grammar.parameters import SPACE_CLASS
from mlx_server.parsers.lenient_json import encode_value
from tests.mlx_server.parsers.grammar_support import (
    TOOLS,
    accepts,
    grammar_for,
    random_outputs,
    smollm_grammar_tokenizer,
)
from tests.mlx_server.parsers.test_hermes_glm import PARSERS, as_pairs

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
    tokenizer, grammar = grammar_for(parser, [VALUES_TOOL], smollm_dir, parallel=False)
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
    tokenizer, grammar = grammar_for(parser, [VALUES_TOOL], smollm_dir, parallel=False)
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
    tokenizer, grammar = grammar_for(parser, EXOTIC_TOOLS, smollm_dir, parallel=False)
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

    from mlx_server.services.pipeline.engine.constraints import lark_grammar, special_tokens_of, specialize

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
