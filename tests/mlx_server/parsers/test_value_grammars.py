"""Call grammars of the Llama, Mistral, pythonic and Gemma formats (grammar/values.py for the
Python and Gemma value syntaxes): awkward schemas taken exactly, added tokens bound."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from jsonschema import Draft202012Validator

from tests.mlx_server.parsers.grammar_support import (
    accepts,
    grammar_for,
    random_outputs,
    smollm_grammar_tokenizer,
)
from tests.mlx_server.parsers.test_llama_mistral import PARSERS, Q, calls_of


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
    tokenizer, grammar = grammar_for(parser, AWKWARD_TOOLS, smollm_dir, parallel=True)
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

    from mlx_server.services.pipeline.engine.constraints import special_tokens_of, specialize

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
