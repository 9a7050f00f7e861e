"""Streaming == batch, for every corpus case of every registered parser and any split.

Hypothesis draws at least 100 splits per case (chunk sizes 1..8 characters), and the real
SmolLM2 tokenizer gives token-aligned splits; every split must give exactly the one-piece
result, and no marker may ever show in content or reasoning.
"""

from __future__ import annotations

import importlib
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mlx_server.parsers.base import ThinkingParser, ToolCallParser
from mlx_server.parsers.null import NullThinkingParser, NullToolParser
from mlx_server.parsers.registry import THINKING_PARSERS, TOOL_PARSERS
from mlx_server.services.pipeline.streaming import ParseResult, StreamingProcessor, parse_output
from tests.mlx_server.parsers.corpus import ParserCase

CORPUS = Path(__file__).parent / "corpus"


def _tool_cases() -> list[tuple[str, ParserCase]]:
    cases = []
    for parser_id in sorted(TOOL_PARSERS):
        if parser_id == "null":
            continue
        module = importlib.import_module(f"tests.mlx_server.parsers.corpus.{parser_id}")
        cases += [(parser_id, case) for case in module.CASES]
    return cases


def _thinking_cases() -> list[tuple[str, str, str, str | None, str]]:
    module = importlib.import_module("tests.mlx_server.parsers.corpus.thinking")
    return list(module.THINKING_CASES)


def _starts_inside(text: str, thinking: ThinkingParser) -> bool:
    """The output closes a block it never opened: the template opened it in the prompt."""
    for start, end in thinking.stream_markers:
        if end and end in text and (start not in text or text.index(end) < text.index(start)):
            return True
    return False


TOOL_CASES = _tool_cases()
THINKING_CASES = _thinking_cases()


def _run(
    pieces: list[str], tool: ToolCallParser, thinking: ThinkingParser, tools: bool, inside: bool
) -> tuple[ParseResult, str, str]:
    processor = StreamingProcessor(tool, thinking, tools_declared=tools, starts_in_thinking=inside)
    events = []
    for piece in pieces:
        events += processor.feed(piece)
    events += processor.finish()
    assert processor.result is not None
    streamed_content = "".join(e.text for e in events if e.kind == "content")
    streamed_reasoning = "".join(e.text for e in events if e.kind == "reasoning")
    return processor.result, streamed_content, streamed_reasoning


def _key(result: ParseResult) -> tuple[str, list[tuple[str, Any]], str | None]:
    calls = [(c.function.name, json.loads(c.function.arguments)) for c in result.tool_calls]
    return result.content, calls, result.reasoning


def _splits(text: str, sizes: list[int]) -> list[str]:
    pieces, at = [], 0
    for size in sizes:
        if at >= len(text):
            break
        pieces.append(text[at : at + size])
        at += size
    if at < len(text):
        pieces.append(text[at:])
    return pieces


def _markers(*parsers: ToolCallParser | ThinkingParser) -> list[str]:
    return [m for p in parsers for pair in p.stream_markers for m in pair if len(m) > 1]


def _check_case(
    tool: ToolCallParser, thinking: ThinkingParser, text: str, tools: bool, inside: bool, data: Any
) -> None:
    batch = parse_output(text, tool, thinking, tools_declared=tools, starts_in_thinking=inside)
    sizes = data.draw(st.lists(st.integers(1, 8), min_size=1, max_size=len(text) + 1))
    result, content, reasoning = _run(_splits(text, sizes), tool, thinking, tools, inside)
    assert _key(result) == _key(batch)
    assert content == result.content
    # Whitespace-only reasoning (an empty <think></think>) streams as is but is no reasoning.
    assert reasoning == result.reasoning if result.reasoning is not None else not reasoning.strip()
    for marker in _markers(tool, thinking):
        assert marker not in result.content and marker not in (result.reasoning or "")


@pytest.mark.parametrize(("parser_id", "case"), TOOL_CASES, ids=[f"{p}:{c.name}" for p, c in TOOL_CASES])
def test_tool_corpus_batch_result(parser_id: str, case: ParserCase) -> None:
    result = parse_output(
        case.text, TOOL_PARSERS[parser_id](), NullThinkingParser(), tools_declared=case.tools is not None
    )
    assert [(c.function.name, json.loads(c.function.arguments)) for c in result.tool_calls] == [
        (name, args) for name, args in case.calls
    ]
    if case.content is not None:
        assert result.content.strip() == case.content.strip()


@pytest.mark.parametrize(("parser_id", "case"), TOOL_CASES, ids=[f"{p}:{c.name}" for p, c in TOOL_CASES])
@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_tool_corpus_any_split_streams_like_batch(parser_id: str, case: ParserCase, data: Any) -> None:
    _check_case(
        TOOL_PARSERS[parser_id](), NullThinkingParser(), case.text, case.tools is not None, False, data
    )


THINKING_IDS = [f"{c[0]}:{c[1]}" for c in THINKING_CASES]


@pytest.mark.parametrize("case", THINKING_CASES, ids=THINKING_IDS)
def test_thinking_corpus_batch_result(case: tuple[str, str, str, str | None, str]) -> None:
    parser_id, _, text, reasoning, content = case
    thinking = THINKING_PARSERS[parser_id]()
    result = parse_output(text, NullToolParser(), thinking, starts_in_thinking=_starts_inside(text, thinking))
    assert (result.reasoning.strip() if result.reasoning is not None else None) == (
        reasoning.strip() if reasoning is not None else None
    )
    assert result.content.strip() == content.strip()


@pytest.mark.parametrize("case", THINKING_CASES, ids=THINKING_IDS)
@settings(max_examples=100, deadline=None)
@given(data=st.data())
def test_thinking_corpus_any_split_streams_like_batch(
    case: tuple[str, str, str, str | None, str], data: Any
) -> None:
    thinking = THINKING_PARSERS[case[0]]()
    _check_case(NullToolParser(), thinking, case[2], False, _starts_inside(case[2], thinking), data)


def test_token_aligned_splits_stream_like_batch(smollm: tuple[Any, Any]) -> None:
    _, tokenizer = smollm
    fast = tokenizer._tokenizer  # the transformers fast tokenizer, for offsets
    for parser_id, case in TOOL_CASES:
        tool = TOOL_PARSERS[parser_id]()
        offsets = fast(case.text, add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"]
        cuts = sorted({end for _, end in offsets if 0 < end < len(case.text)})
        pieces = [case.text[a:b] for a, b in zip([0, *cuts], [*cuts, len(case.text)], strict=True)]
        tools = case.tools is not None
        batch = parse_output(case.text, tool, NullThinkingParser(), tools_declared=tools)
        result, _, _ = _run(pieces, tool, NullThinkingParser(), tools, False)
        assert _key(result) == _key(batch), (parser_id, case.name)
