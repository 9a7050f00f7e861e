"""Reasoning blocks: `<think>` tags, Magistral's `[THINK]` and harmony's analysis channel.

The text these parsers see may start inside a block (the chat template opened it, so only the
closing tag is in the output) or stop inside one (cut off by max_tokens): both are reasoning,
never content. Nothing inside a block is altered, so a tool call a model writes while thinking
is still in the reasoning text for the tool parser to find.
"""

from __future__ import annotations

from mlx_server.parsers.base import ThinkingParser
from mlx_server.parsers.harmony import HARMONY_HEADERS
from mlx_server.parsers.harmony_messages import split_harmony

THINK_OPEN = "<think>"
THINK_CLOSE = "</think>"


def opens_thinking(prompt: str, parser: ThinkingParser | None = None) -> bool:
    """Whether `prompt` ends inside an opened reasoning block, so generation starts in reasoning.

    True when the prompt's tail (whitespace aside) is an opening marker of `parser` (of
    `think_tag` when None): e.g. the DeepSeek-R1 and Qwen3-Thinking-2507 templates end with `<think>\\n`.
    """
    markers = parser.stream_markers if parser is not None else [(THINK_OPEN, THINK_CLOSE)]
    tail = prompt.rstrip()
    return any(start.strip() and tail.endswith(start.strip()) for start, _ in markers)


def _blocks(text: str, open_tag: str, close_tag: str) -> tuple[list[str], list[str]]:
    """(reasoning blocks, content pieces) of `text`."""
    reasoning: list[str] = []
    content: list[str] = []
    pos = 0
    first_close = text.find(close_tag)
    first_open = text.find(open_tag)
    if first_close != -1 and (first_open == -1 or first_close < first_open):
        # Started inside a block the prompt opened: everything before the close is reasoning.
        reasoning.append(text[:first_close])
        pos = first_close + len(close_tag)
    while True:
        start = text.find(open_tag, pos)
        if start == -1:
            content.append(text[pos:])
            break
        content.append(text[pos:start])
        end = text.find(close_tag, start + len(open_tag))
        if end == -1:
            # Cut off while thinking: the rest is reasoning, not an answer.
            reasoning.append(text[start + len(open_tag) :])
            break
        reasoning.append(text[start + len(open_tag) : end])
        pos = end + len(close_tag)
    # An opener written inside a block (the prompt opened it, the model wrote it again) is dropped.
    return [block.replace(open_tag, "") for block in reasoning], content


def _joined(blocks: list[str]) -> str | None:
    parts = [block.strip() for block in blocks if block.strip()]
    return "\n".join(parts) if parts else None


class _TagThinkingParser(ThinkingParser):
    """Reasoning between an opening and a closing tag."""

    open_tag = THINK_OPEN
    close_tag = THINK_CLOSE

    @property
    def stream_markers(self) -> list[tuple[str, str]]:
        return [(self.open_tag, self.close_tag)]

    @property
    def drop_markers(self) -> list[str]:
        # Outside a block the opener is a stream marker (which wins over a drop at the same
        # place); inside one, the model writing it again (the prompt opened the block) is noise.
        return [self.open_tag]

    def extract(self, text: str) -> str | None:
        return _joined(_blocks(text, self.open_tag, self.close_tag)[0])

    def remove(self, text: str) -> str:
        reasoning, content = _blocks(text, self.open_tag, self.close_tag)
        return "".join(content).strip() if reasoning else text


class ThinkTagParser(_TagThinkingParser):
    """`<think>…</think>`: Qwen3, GLM-4.5+, DeepSeek-R1, Kimi K2 Thinking, MiniMax M2."""

    parser_id = "think_tag"

    @property
    def supports_toggle(self) -> bool:
        return True


class MistralThinkParser(_TagThinkingParser):
    """`[THINK]…[/THINK]`: Magistral 2507+ (thinking is asked for in the system prompt, not toggled)."""

    open_tag = "[THINK]"
    close_tag = "[/THINK]"

    parser_id = "mistral_think"


class HarmonyThinkingParser(ThinkingParser):
    """gpt-oss chain of thought: messages on harmony's `analysis` channel.

    `remove` takes out whole analysis messages (with their `<|start|>assistant` header) and
    leaves the other messages as they are, headers included: the harmony tool parser still
    needs them, and `harmony.content_of` turns what is left into content.
    """

    parser_id = "harmony_analysis"

    @property
    def drop_markers(self) -> list[str]:
        return HARMONY_HEADERS

    @property
    def stream_markers(self) -> list[tuple[str, str]]:
        # One pair: a `<|start|>assistant` before it is header text the content step strips.
        return [("<|channel|>analysis<|message|>", "<|end|>")]

    @property
    def block_ends_before(self) -> list[str]:
        # An analysis message the model did not close ends where the next header starts (as
        # split_harmony reads it): the final answer after it is content, not reasoning.
        return ["<|start|>", "<|channel|>"]

    @staticmethod
    def _split(text: str) -> tuple[list[str], list[str]]:
        reasoning: list[str] = []
        rest: list[str] = []
        for index, part in enumerate(split_harmony(text)):
            if part.is_analysis:
                reasoning.append(part.body)
            elif index == 0 and part.header is None and "<|end|>" in part.body:
                # Started inside an analysis message the prompt opened: up to `<|end|>`.
                head, _, tail = part.body.partition("<|end|>")
                reasoning.append(head)
                rest.append(tail)
            else:
                rest.append(text[part.start : part.end])
        return reasoning, rest

    def extract(self, text: str) -> str | None:
        return _joined(self._split(text)[0])

    def remove(self, text: str) -> str:
        reasoning, rest = self._split(text)
        return "".join(rest).strip() if reasoning else text
