"""The pipeline's output, protocol-free: what one generation produced, as typed events.

`generate_chat_completion()` and `generate_completion()` yield these and nothing else; each
protocol has one renderer that turns them into its own wire shapes (OpenAI chunks and
responses, Anthropic events and messages, the playground's UI events). No renderer reads
another protocol's output. `Reply.collect()` folds a stream into the non-streamed result.

Order within one stream: any number of `TextDelta`, `ReasoningDelta` and tool-call events;
then zero or more `Notice`; then exactly one `Finish`; then exactly one `Usage`, last.
A tool call is `ToolCallStarted` (id and name), one or more `ToolCallDelta` (argument
fragments that concatenate to its JSON arguments), then `ToolCallDone` (the checked call).
"""

from __future__ import annotations

from collections.abc import AsyncIterable
from dataclasses import dataclass, field
from typing import Literal

from mlx_server.schemas.openai import ToolCall

FinishReason = Literal["stop", "length", "tool_calls"]


@dataclass(frozen=True)
class TokenLogprob:
    """One generated token's log probability, and the most likely alternatives on request."""

    token: str
    logprob: float
    top: list[tuple[str, float]]


@dataclass(frozen=True)
class TextDelta:
    """Reply text (chat content, or the continuation of a completions prompt)."""

    text: str
    logprobs: tuple[TokenLogprob, ...] = ()


@dataclass(frozen=True)
class ReasoningDelta:
    text: str


@dataclass(frozen=True)
class ToolCallStarted:
    index: int
    id: str
    name: str


@dataclass(frozen=True)
class ToolCallDelta:
    index: int
    arguments: str


@dataclass(frozen=True)
class ToolCallDone:
    index: int
    call: ToolCall


@dataclass(frozen=True)
class ToolCallRejected:
    """A call the model wrote that is not a valid call of a declared tool, with why. It is not
    part of the reply; an agent loop may feed the reason back to the model."""

    call: ToolCall
    reason: str


@dataclass(frozen=True)
class Notice:
    """Something the client asked for that the reply does not deliver (a warning)."""

    message: str


@dataclass(frozen=True)
class Finish:
    reason: FinishReason
    # The stop string that ended the reply, if one did.
    stop_sequence: str | None = None


@dataclass(frozen=True)
class Usage:
    prompt_tokens: int
    completion_tokens: int
    # Prompt tokens whose KV state came from the prompt cache instead of a prefill.
    cached_prompt_tokens: int = 0
    ttft_s: float | None = None
    decode_tokens_per_s: float | None = None
    # Speculative decoding: generated tokens the draft model proposed (None: no draft ran),
    # and their share of the generated tokens.
    draft_tokens: int | None = None
    draft_acceptance_rate: float | None = None

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


ToolCallEvent = ToolCallStarted | ToolCallDelta | ToolCallDone | ToolCallRejected
GenerationEvent = TextDelta | ReasoningDelta | ToolCallEvent | Notice | Finish | Usage


@dataclass
class Reply:
    """A whole reply, folded from its events: what a non-streamed response renders."""

    text: str = ""
    reasoning: str | None = None
    tool_calls: list[ToolCall] = field(default_factory=list)
    rejected_calls: list[ToolCallRejected] = field(default_factory=list)
    logprobs: list[TokenLogprob] = field(default_factory=list)
    # Where in `text` the first token with logprobs starts (after an echoed prompt).
    logprobs_offset: int | None = None
    notices: list[str] = field(default_factory=list)
    finish: Finish | None = None
    usage: Usage | None = None

    def add(self, event: GenerationEvent) -> None:
        match event:
            case TextDelta(text=text, logprobs=logprobs):
                if logprobs and self.logprobs_offset is None:
                    self.logprobs_offset = len(self.text)
                self.text += text
                self.logprobs.extend(logprobs)
            case ReasoningDelta(text=text):
                self.reasoning = (self.reasoning or "") + text
            case ToolCallDone(call=call):
                self.tool_calls.append(call)
            case ToolCallRejected():
                self.rejected_calls.append(event)
            case Notice(message=message):
                self.notices.append(message)
            case Finish():
                self.finish = event
            case Usage():
                self.usage = event

    @property
    def content(self) -> str | None:
        """The message text as a non-streamed chat response carries it: trimmed when it sits
        beside reasoning or calls, absent when a call is all there is."""
        text = self.text.strip() if (self.tool_calls or self.reasoning is not None) else self.text
        return text if text or not self.tool_calls else None

    @property
    def reasoning_content(self) -> str | None:
        return self.reasoning.strip() if self.reasoning is not None else None

    @classmethod
    async def collect(cls, events: AsyncIterable[GenerationEvent]) -> Reply:
        reply = cls()
        async for event in events:
            reply.add(event)
        return reply
