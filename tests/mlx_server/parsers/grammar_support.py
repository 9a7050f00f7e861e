"""Drive a parser's call grammar without a model: random walks through what the grammar allows.

`random_outputs` samples uniformly among the tokens the grammar permits at each step (the
SmolLM2 vocabulary, via llguidance), so every output is one the constrained model could have
written; the tests then check the parser reads each back as valid calls.
"""

from __future__ import annotations

import random
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
from llguidance import LLMatcher, LLTokenizer

from mlx_server.parsers.base import ToolCallParser


def function_tool(
    name: str, properties: dict[str, Any], required: list[str] | None = None, *, closed: bool = True
) -> dict[str, Any]:
    """An OpenAI function tool whose parameters are an object of `properties` (`closed`: no others)."""
    parameters: dict[str, Any] = {"type": "object", "properties": properties}
    if required is not None:
        parameters["required"] = required
    if closed:
        parameters["additionalProperties"] = False
    return {"type": "function", "function": {"name": name, "parameters": parameters}}


CITY_AND_DAYS = {
    "city": {"type": "string", "maxLength": 12},
    "days": {"type": "integer", "minimum": 1, "maximum": 7},
}
GET_TIME = function_tool("get_time", {"tz": {"enum": ["UTC", "CET", "JST"]}}, ["tz"])
_ADDRESS = {
    "type": "object",
    "properties": {"city": {"type": "string", "maxLength": 10}},
    "required": ["city"],
    "additionalProperties": False,
}
_SHIP = function_tool(
    "ship",
    {"to": {"$ref": "#/$defs/Address"}, "count": {"type": "integer", "minimum": 1, "maximum": 3}},
    ["to", "count"],
)
_SHIP["function"]["parameters"] = {"$defs": {"Address": _ADDRESS}, **_SHIP["function"]["parameters"]}
_BOOK_TABLE = {
    "guests": {"type": "integer", "minimum": 1, "maximum": 8},
    "vegetarian": {"type": "boolean"},
    "notes": {"type": "array", "items": {"type": "string", "maxLength": 8}, "maxItems": 2},
    "where": {
        "type": "object",
        "properties": {"area": {"type": "string", "maxLength": 8}},
        "required": ["area"],
        "additionalProperties": False,
    },
}

TOOLS: dict[str, list[dict[str, Any]]] = {
    # What pydantic writes for nested models: references into $defs.
    "schema with refs": [_SHIP],
    "one tool": [function_tool("get_weather", CITY_AND_DAYS, ["city", "days"])],
    "three tools": [
        GET_TIME,
        function_tool("ping", {}),
        function_tool("book_table", _BOOK_TABLE, ["guests", "where"]),
    ],
}


@cache
def smollm_grammar_tokenizer(tokenizer_dir: str) -> LLTokenizer:
    from llguidance.hf import from_tokenizer
    from transformers import AutoTokenizer

    return from_tokenizer(AutoTokenizer.from_pretrained(tokenizer_dir))


def grammar_for(
    parser: ToolCallParser, tools: list[dict[str, Any]], smollm_dir: Path, *, parallel: bool
) -> tuple[LLTokenizer, str]:
    """The SmolLM2 grammar tokenizer and `parser`'s call grammar for `tools` (which must exist)."""
    grammar = parser.call_grammar(tools, parallel=parallel)
    assert grammar is not None, f"{parser.parser_id} gives no grammar"
    return smollm_grammar_tokenizer(str(smollm_dir)), grammar


def matcher(tokenizer: LLTokenizer, grammar: str) -> LLMatcher:
    built = LLMatcher(tokenizer, grammar, log_level=0)
    assert not built.is_error(), built.get_error()
    return built


def random_outputs(
    parser: ToolCallParser,
    tools: list[dict[str, Any]],
    tokenizer: LLTokenizer,
    *,
    parallel: bool,
    count: int,
    seed: int,
) -> list[str]:
    """`count` complete outputs the grammar accepts (token by token, uniformly among allowed tokens)."""
    grammar = parser.call_grammar(tools, parallel=parallel)
    assert grammar is not None, f"{parser.parser_id} gives no grammar"
    rng = random.Random(seed)
    outputs = []
    for _ in range(count):
        walk = matcher(tokenizer, grammar)
        tokens: list[int] = []
        for _ in range(1000):
            if walk.is_stopped():
                break
            allowed = np.flatnonzero(
                np.unpackbits(np.frombuffer(walk.compute_bitmask(), dtype=np.uint8), bitorder="little")
            )
            allowed = allowed[allowed < tokenizer.vocab_size]
            choices = [int(t) for t in allowed if int(t) != tokenizer.eos_token]
            if walk.is_accepting() and (not choices or rng.random() < 0.6):
                break
            token = rng.choice(choices)
            assert walk.consume_token(token), walk.get_error()
            tokens.append(token)
        assert walk.is_accepting(), f"the walk did not finish: {tokenizer.decode_str(tokens)!r}"
        outputs.append(tokenizer.decode_str(tokens))
    return outputs


def accepts(tokenizer: LLTokenizer, grammar: str, text: str) -> bool:
    """Whether `text` is a complete output of the grammar."""
    walk = matcher(tokenizer, grammar)
    tokens = tokenizer.tokenize_str(text)
    return walk.validate_tokens(tokens) == len(tokens) and walk.consume_tokens(tokens) and walk.is_accepting()
