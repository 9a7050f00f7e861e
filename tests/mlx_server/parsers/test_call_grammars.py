"""Every constrainable tool-call format: what its grammar allows, its parser reads as valid calls.

Random walks through each grammar (no model: uniformly among the tokens it allows) stand in for
every output a constrained model could write; each must parse into calls to declared tools with
schema-valid arguments, exactly one call unless parallel calls are allowed.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft202012Validator

from mlx_server.parsers.base import make_tool_call
from mlx_server.parsers.grammar.blocks import parameters_schema, tool_name
from mlx_server.parsers.registry import TOOL_PARSERS
from tests.mlx_server.parsers.grammar_support import (
    TOOLS,
    accepts,
    grammar_for,
    random_outputs,
    smollm_grammar_tokenizer,
)

CONSTRAINED = sorted(
    p for p in TOOL_PARSERS if TOOL_PARSERS[p]().call_grammar(TOOLS["one tool"], parallel=False)
)


def test_every_format_but_null_can_be_constrained() -> None:
    assert sorted(set(TOOL_PARSERS) - set(CONSTRAINED)) == ["null"]


@pytest.mark.parametrize("parser_id", CONSTRAINED)
@pytest.mark.parametrize("tool_set", sorted(TOOLS))
@pytest.mark.parametrize("parallel", [False, True])
def test_every_output_the_grammar_allows_parses_to_valid_calls(
    smollm_dir: Path, parser_id: str, tool_set: str, parallel: bool
) -> None:
    parser = TOOL_PARSERS[parser_id]()
    tools = TOOLS[tool_set]
    schemas = {tool_name(t): parameters_schema(t) for t in tools}
    tokenizer = smollm_grammar_tokenizer(str(smollm_dir))
    for text in random_outputs(parser, tools, tokenizer, parallel=parallel, count=12, seed=len(parser_id)):
        calls = parser.extract(text)
        assert calls, f"{parser_id} could not read its own grammar's output: {text!r}"
        if not parallel:
            assert len(calls) == 1, text
        for call in calls:
            assert call.function.name in schemas, text
            arguments = json.loads(call.function.arguments)
            errors = list(Draft202012Validator(schemas[call.function.name]).iter_errors(arguments))
            assert not errors, f"{text!r}: {errors[0].message}"


@pytest.mark.parametrize("parser_id", CONSTRAINED)
def test_the_grammar_accepts_valid_calls_and_refuses_invalid_arguments(
    smollm_dir: Path, parser_id: str
) -> None:
    parser = TOOL_PARSERS[parser_id]()
    tokenizer, grammar = grammar_for(parser, TOOLS["one tool"], smollm_dir, parallel=False)
    good: Any = {"city": "Paris", "days": 3}
    assert accepts(tokenizer, grammar, parser.render_calls([make_tool_call("get_weather", good)]))
    assert not accepts(
        tokenizer, grammar, parser.render_calls([make_tool_call("get_weather", {"city": "Paris", "days": 9})])
    )
    assert not accepts(tokenizer, grammar, parser.render_calls([make_tool_call("delete_all", good)]))


@pytest.mark.parametrize("special", [True, False])
def test_markers_that_are_single_added_tokens_are_matched_as_those_tokens(
    smollm_dir: Path, special: bool
) -> None:
    """Qwen's <tool_call> is one added token: the model emits its id, and the grammar must allow it."""
    from llguidance import LLMatcher
    from llguidance.hf import from_tokenizer
    from transformers import AutoTokenizer

    from mlx_server.services.pipeline.engine.constraints import lark_grammar, special_tokens_of, specialize

    hf = AutoTokenizer.from_pretrained(str(smollm_dir))
    hf.add_tokens(["<tool_call>", "</tool_call>"], special_tokens=special)
    tokenizer = from_tokenizer(hf)
    parser = TOOL_PARSERS["hermes_json"]()
    lark = parser.call_grammar(TOOLS["one tool"], parallel=False)
    assert lark is not None
    ids = hf.encode(
        parser.render_calls([make_tool_call("get_weather", {"city": "Oslo", "days": 2})]),
        add_special_tokens=False,
    )
    assert hf.convert_tokens_to_ids("<tool_call>") in ids  # the marker is one token here

    bound = LLMatcher(tokenizer, lark_grammar(specialize(lark, special_tokens_of(hf))), log_level=0)
    assert bound.validate_tokens(ids) == len(ids) and bound.consume_tokens(ids) and bound.is_accepting()
    quoted = LLMatcher(tokenizer, lark_grammar(lark), log_level=0)
    assert quoted.validate_tokens(ids) < len(ids)  # what binding fixes: quoted text refuses the token
