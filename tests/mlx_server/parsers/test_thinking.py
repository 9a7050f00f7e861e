"""Reasoning parsers (`<think>`, `[THINK]`, harmony analysis) against the thinking corpus."""

from __future__ import annotations

from collections import Counter

import pytest

from mlx_server.parsers.base import ThinkingParser
from mlx_server.parsers.harmony import HarmonyParser, content_of, strip_harmony_control
from mlx_server.parsers.kimi import KimiK2Parser
from mlx_server.parsers.null import NullThinkingParser, NullToolParser
from mlx_server.parsers.thinking import (
    HarmonyThinkingParser,
    MistralThinkParser,
    ThinkTagParser,
    opens_thinking,
)
from mlx_server.services.pipeline.streaming import StreamingProcessor, parse_output
from tests.mlx_server.parsers.corpus.thinking import THINKING_CASES

PARSERS: dict[str, ThinkingParser] = {
    "think_tag": ThinkTagParser(),
    "mistral_think": MistralThinkParser(),
    "harmony_analysis": HarmonyThinkingParser(),
}
CASE_IDS = [f"{parser_id}-{name}" for parser_id, name, *_ in THINKING_CASES]
Case = tuple[str, str, str, str | None, str]


def _visible(parser_id: str, text: str) -> str:
    if parser_id != "harmony_analysis":
        return text
    assert content_of(text) == strip_harmony_control(text)  # the corpus holds no harmony calls
    return strip_harmony_control(text)


def _streamed(parser: ThinkingParser, text: str) -> tuple[list[str], str]:
    """(reasoning segments, content) as the StreamingProcessor splits by the stream markers."""
    reasoning: list[str] = []
    out: list[str] = []
    pos = 0
    while True:
        hits = [(text.find(s, pos), -len(s), s, e) for s, e in parser.stream_markers if s in text[pos:]]
        if not hits:
            out.append(text[pos:])
            return reasoning, "".join(out)
        index, _, start, end = min(hits)
        out.append(text[pos:index])
        close = text.find(end, index + len(start))
        stop = close if close != -1 else len(text)
        reasoning.append(text[index + len(start) : stop])
        pos = stop + len(end) if close != -1 else len(text)


def test_corpus_sizes() -> None:
    counts = Counter(parser_id for parser_id, *_ in THINKING_CASES)
    assert set(counts) == set(PARSERS)
    assert all(count >= 8 for count in counts.values()), counts


@pytest.mark.parametrize(("parser_id", "name", "text", "reasoning", "content"), THINKING_CASES, ids=CASE_IDS)
def test_extract_and_remove(
    parser_id: str, name: str, text: str, reasoning: str | None, content: str
) -> None:
    parser = PARSERS[parser_id]
    assert parser.extract(text) == reasoning
    assert _visible(parser_id, parser.remove(text)).strip() == content.strip()


@pytest.mark.parametrize(("parser_id", "name", "text", "reasoning", "content"), THINKING_CASES, ids=CASE_IDS)
def test_stream_markers_agree(
    parser_id: str, name: str, text: str, reasoning: str | None, content: str
) -> None:
    """Splitting by the markers gives the same result; a prompt that opened the block is
    replayed by putting its opening marker back in front of the output."""
    parser = PARSERS[parser_id]
    if name.startswith("started_inside"):
        text = parser.stream_markers[-1][0] + text
    segments, streamed = _streamed(parser, text)
    joined = "\n".join(s.strip() for s in segments if s.strip()) or None
    assert joined == reasoning
    assert _visible(parser_id, streamed).strip() == content.strip()
    assert parser.extract(text) == reasoning


def test_remove_keeps_text_without_reasoning() -> None:
    text = "  Answer with spaces.\n"
    for parser in PARSERS.values():
        assert parser.remove(text) == text
        assert parser.extract(text) is None


def test_toggle_and_ids() -> None:
    assert {parser_id: p.supports_toggle for parser_id, p in PARSERS.items()} == {
        "think_tag": True,
        "mistral_think": False,
        "harmony_analysis": False,
    }
    assert all(p.parser_id == parser_id for parser_id, p in PARSERS.items())


@pytest.mark.parametrize(
    ("prompt", "parser", "expected"),
    [
        ("<｜User｜>Hi<｜Assistant｜><think>\n", None, True),
        ("<|im_start|>assistant\n<think>\n\n", ThinkTagParser(), True),
        ("<|im_start|>assistant\n<think>\n\n</think>\n\n", ThinkTagParser(), False),
        ("<|im_start|>assistant\n", None, False),
        ("", None, False),
        ("[INST]Hi[/INST][THINK]", MistralThinkParser(), True),
        ("[INST]Hi[/INST][THINK]", ThinkTagParser(), False),
        ("<|start|>assistant", HarmonyThinkingParser(), False),
        ("<|start|>assistant<|channel|>analysis<|message|>", HarmonyThinkingParser(), True),
        ("<think>", NullThinkingParser(), False),
    ],
)
def test_opens_thinking(prompt: str, parser: ThinkingParser | None, expected: bool) -> None:
    assert opens_thinking(prompt, parser) is expected


def test_call_inside_reasoning_survives_for_the_tool_parser() -> None:
    case = next(c for c in THINKING_CASES if c[0] == "think_tag" and c[1] == "kimi_call_inside_block")
    reasoning = PARSERS["think_tag"].extract(case[2])
    assert reasoning is not None
    calls = KimiK2Parser().extract(reasoning)
    assert [(c.function.name, c.function.arguments) for c in calls] == [("get_weather", '{"city": "Paris"}')]


_HARMONY_CALL = (
    "<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>"
    '{"city":"Paris"}<|call|>'
)


def test_harmony_remove_keeps_calls_for_the_tool_parser() -> None:
    text = "<|channel|>analysis<|message|>Need to use function get_weather.<|end|>" + _HARMONY_CALL
    thinking = HarmonyThinkingParser()
    assert thinking.extract(text) == "Need to use function get_weather."
    rest = thinking.remove(text)
    assert rest == _HARMONY_CALL
    assert [c.function.name for c in HarmonyParser().extract(rest)] == ["get_weather"]
    assert content_of(rest) == ""


def test_harmony_call_on_analysis_channel_is_not_reasoning() -> None:
    text = '<|channel|>analysis to=functions.get_weather code<|message|>{"city":"Paris"}<|call|>'
    thinking = HarmonyThinkingParser()
    assert thinking.extract(text) is None
    assert thinking.remove(text) == text
    assert [c.function.name for c in HarmonyParser().extract(text)] == ["get_weather"]


@pytest.mark.parametrize("parser", [ThinkTagParser(), MistralThinkParser()], ids=lambda p: p.parser_id)
def test_opener_written_again_inside_an_opened_block_is_dropped(parser: ThinkingParser) -> None:
    # The template ended with the opener; the model writes it again before thinking.
    open_tag, close_tag = parser.stream_markers[0]
    output = f"{open_tag}\nThe user wants a greeting.{close_tag}\n\nHello!"
    result = parse_output(output, NullToolParser(), parser, starts_in_thinking=True)
    assert result.reasoning == "\nThe user wants a greeting."
    assert result.content == "\n\nHello!"
    streamed = StreamingProcessor(NullToolParser(), parser, starts_in_thinking=True)
    for char in output:
        streamed.feed(char)
    streamed.finish()
    assert streamed.result == result
    # The batch reading of the prompt's opener + the output agrees.
    assert parser.extract(open_tag + output) == "The user wants a greeting."
    assert parser.remove(open_tag + output) == "Hello!"
    # Outside a block the opener still opens one.
    assert parse_output(f"{open_tag}a{close_tag}b", NullToolParser(), parser).reasoning == "a"


@pytest.mark.parametrize("opened_by_prompt", [False, True])
def test_harmony_analysis_without_end_is_closed_by_the_next_header(opened_by_prompt: bool) -> None:
    analysis = "<|channel|>analysis<|message|>"
    output = "The user says hi. Reply briefly.<|start|>assistant<|channel|>final<|message|>Hello!"
    output = output if opened_by_prompt else analysis + output
    parser = HarmonyThinkingParser()
    result = parse_output(output, HarmonyParser(), parser, starts_in_thinking=opened_by_prompt)
    assert (result.reasoning, result.content) == ("The user says hi. Reply briefly.", "Hello!")
    streamed = StreamingProcessor(HarmonyParser(), parser, starts_in_thinking=opened_by_prompt)
    for char in output:
        streamed.feed(char)
    streamed.finish()
    assert streamed.result == result
    batch = output if not opened_by_prompt else analysis + output
    assert parser.extract(batch) == "The user says hi. Reply briefly."
    assert content_of(parser.remove(batch)) == "Hello!"
    # A bare channel header (no `<|start|>`) ends it too, and a call after it is still a call.
    call = '<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"city":"Paris"}'
    result = parse_output(analysis + "Need weather." + call, HarmonyParser(), parser)
    assert result.reasoning == "Need weather."
    assert [c.function.name for c in result.tool_calls] == ["get_weather"]
