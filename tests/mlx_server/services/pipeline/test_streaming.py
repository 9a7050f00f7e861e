"""StreamingProcessor behaviours that cross parsers: calls in reasoning, opened blocks, leading calls."""

from __future__ import annotations

import json

from mlx_server.parsers.hermes import HermesJsonParser
from mlx_server.parsers.kimi import KimiK2Parser
from mlx_server.parsers.mistral import MistralParser
from mlx_server.parsers.null import NullThinkingParser
from mlx_server.parsers.thinking import ThinkTagParser
from mlx_server.services.pipeline.chat_turn import opens_thinking
from mlx_server.services.pipeline.streaming import StreamingProcessor, parse_output


def _calls(result: object) -> list[tuple[str, object]]:
    return [(c.function.name, json.loads(c.function.arguments)) for c in result.tool_calls]  # type: ignore[attr-defined]


def test_a_call_made_while_reasoning_is_still_a_tool_call() -> None:
    text = (
        "<think>I need the weather. <|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0"
        '<|tool_call_argument_begin|>{"city": "Paris"}<|tool_call_end|><|tool_calls_section_end|></think>'
    )
    result = parse_output(text, KimiK2Parser(), ThinkTagParser())
    assert _calls(result) == [("get_weather", {"city": "Paris"})]
    assert result.reasoning is not None and result.reasoning.strip() == "I need the weather."
    assert result.content == ""


def test_a_reply_that_starts_inside_an_opened_think_block_is_reasoning_until_it_closes() -> None:
    prompt = "<|im_start|>assistant\n<think>\n"
    assert opens_thinking(prompt, ThinkTagParser())
    assert not opens_thinking("<|im_start|>assistant\n", ThinkTagParser())
    processor = StreamingProcessor(HermesJsonParser(), ThinkTagParser(), starts_in_thinking=True)
    events = processor.feed("Paris is in France.</think>\n\nParis.")
    events += processor.finish()
    assert events[0].kind == "reasoning"
    assert processor.result is not None
    assert processor.result.reasoning == "Paris is in France."
    assert processor.result.content.strip() == "Paris."


def test_reasoning_cut_off_by_max_tokens_is_reasoning_not_content() -> None:
    result = parse_output(
        "<think>Let me think about this carefully and", HermesJsonParser(), ThinkTagParser()
    )
    assert result.reasoning == "Let me think about this carefully and"
    assert result.content == ""


def test_a_bare_call_is_recovered_only_when_tools_are_declared() -> None:
    text = '{"name": "get_weather", "arguments": {"city": "Paris"}}'
    assert _calls(parse_output(text, HermesJsonParser(), NullThinkingParser(), tools_declared=True)) == [
        ("get_weather", {"city": "Paris"})
    ]
    plain = parse_output(text, HermesJsonParser(), NullThinkingParser(), tools_declared=False)
    assert plain.tool_calls == [] and plain.content == text


def test_a_marker_split_across_chunks_is_never_emitted_as_content() -> None:
    processor = StreamingProcessor(HermesJsonParser(), NullThinkingParser())
    emitted = []
    for piece in ["Checking", " <tool", "_ca", 'll>{"name": "f", "arguments": {}}</tool', "_call> done"]:
        emitted += [e.text for e in processor.feed(piece) if e.kind == "content"]
    emitted += [e.text for e in processor.finish() if e.kind == "content"]
    assert "".join(emitted) == "Checking  done"
    assert all("<" not in text for text in emitted)


def test_mistral_marker_with_no_call_leaves_no_tag_in_content() -> None:
    result = parse_output(
        "[TOOL_CALLS]I cannot call tools here.", MistralParser(), NullThinkingParser(), tools_declared=True
    )
    assert result.tool_calls == []
    assert "[TOOL_CALLS]" not in result.content and "I cannot call tools here." in result.content
