"""OpenAI's shapes, rendered from the pipeline's events: chunks while streaming (chat and
legacy completions), response objects from a folded `Reply`."""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterable, AsyncIterator, Sequence
from typing import Literal

from mlx_server.services.pipeline.events import (
    Finish,
    GenerationEvent,
    Notice,
    ReasoningDelta,
    Reply,
    TextDelta,
    TokenLogprob,
    ToolCallDelta,
    ToolCallStarted,
    Usage,
)
from mlx_server.services.pipeline.protocols.openai_shapes import (
    ChatChunkChoice,
    ChatCompletion,
    ChatDelta,
    ChatLogprobs,
    ChatMessage,
    Chunk,
    CompletionLogprobs,
    FunctionDelta,
    TextChoice,
    TextCompletion,
    TokenEntry,
    UsageBody,
)


def new_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:24]}"


def usage(figures: Usage | None) -> UsageBody:
    prompt = figures.prompt_tokens if figures else 0
    completion = figures.completion_tokens if figures else 0
    shape: UsageBody = {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        # The prompt tokens the prefix cache already held (OpenAI's name for it).
        "prompt_tokens_details": {"cached_tokens": figures.cached_prompt_tokens if figures else 0},
    }
    if figures and figures.draft_tokens is not None:
        # Speculative decoding: the tokens the draft model proposed that the model kept (OpenAI's
        # name for the kept tokens of a predicted output), and their share of the completion.
        shape["completion_tokens_details"] = {"accepted_prediction_tokens": figures.draft_tokens}
        shape["draft_acceptance_rate"] = figures.draft_acceptance_rate
    return shape


def _token_entry(token: str, logprob: float) -> TokenEntry:
    return {"token": token, "logprob": logprob, "bytes": list(token.encode("utf-8"))}


def chat_logprobs(entries: Sequence[TokenLogprob]) -> ChatLogprobs:
    return {
        "content": [
            {
                "token": e.token,
                "logprob": e.logprob,
                "bytes": list(e.token.encode("utf-8")),
                "top_logprobs": [_token_entry(t, lp) for t, lp in e.top],
            }
            for e in entries
        ]
    }


def completion_logprobs(entries: Sequence[TokenLogprob], text_offset: int) -> CompletionLogprobs:
    """The legacy completions shape: parallel lists, top alternatives as {token: logprob}."""
    offsets = []
    for entry in entries:
        offsets.append(text_offset)
        text_offset += len(entry.token)
    return {
        "tokens": [e.token for e in entries],
        "token_logprobs": [e.logprob for e in entries],
        "top_logprobs": [dict(e.top) for e in entries],
        "text_offset": offsets,
    }


class ChunkFactory:
    """Chunks of one streamed response: same id, created time and model on every chunk."""

    def __init__(self, model: str, *, chat: bool, include_usage: bool) -> None:
        self.id = new_id("chatcmpl" if chat else "cmpl")
        self.object: Literal["chat.completion.chunk", "text_completion"] = (
            "chat.completion.chunk" if chat else "text_completion"
        )
        self.created = int(time.time())
        self.model = model
        self.include_usage = include_usage

    def chunk(self, choice: ChatChunkChoice | TextChoice) -> Chunk:
        body = self._envelope([choice])
        if self.include_usage:
            body["usage"] = None
        return body

    def usage_chunk(self, figures: Usage) -> Chunk:
        body = self._envelope([])
        body["usage"] = usage(figures)
        return body

    def _envelope(self, choices: list[ChatChunkChoice | TextChoice]) -> Chunk:
        return {
            "id": self.id,
            "object": self.object,
            "created": self.created,
            "model": self.model,
            "choices": choices,
        }


def _delta(delta: ChatDelta, logprobs: ChatLogprobs | None = None) -> ChatChunkChoice:
    return {"index": 0, "delta": delta, "logprobs": logprobs, "finish_reason": None}


def _chat_choice(event: GenerationEvent) -> ChatChunkChoice | None:
    """The chunk choice one event becomes, if any (a tool call streams its id, type and name
    first, then its arguments, as OpenAI does)."""
    match event:
        case TextDelta(text=text, logprobs=logprobs):
            return _delta({"content": text}, chat_logprobs(logprobs) if logprobs else None)
        case ReasoningDelta(text=text):
            return _delta({"reasoning_content": text})
        case ToolCallStarted(index=index, id=call_id, name=name):
            function: FunctionDelta = {"name": name, "arguments": ""}
            return _delta(
                {"tool_calls": [{"index": index, "id": call_id, "type": "function", "function": function}]}
            )
        case ToolCallDelta(index=index, arguments=arguments):
            return _delta({"tool_calls": [{"index": index, "function": {"arguments": arguments}}]})
        case Finish(reason=reason):
            return {"index": 0, "delta": {}, "logprobs": None, "finish_reason": reason}
    return None


async def chat_chunks(
    events: AsyncIterable[GenerationEvent], model: str, *, include_usage: bool
) -> AsyncIterator[Chunk]:
    """`chat.completion.chunk`s: the assistant role first, one chunk per event, the finish
    reason in its own chunk, and the usage chunk (`choices: []`) last when asked for."""
    chunks = ChunkFactory(model, chat=True, include_usage=include_usage)
    yield chunks.chunk(_delta({"role": "assistant", "content": ""}))
    notices: list[str] = []
    async for event in events:
        if isinstance(event, Usage):
            if include_usage:
                yield chunks.usage_chunk(event)
        elif isinstance(event, Notice):
            notices.append(event.message)
        elif (choice := _chat_choice(event)) is not None:
            chunk = chunks.chunk(choice)
            if isinstance(event, Finish) and notices:
                chunk["warnings"] = notices  # the finish chunk, as a whole reply's `warnings`
            yield chunk


async def text_chunks(
    events: AsyncIterable[GenerationEvent], model: str, *, include_usage: bool, logprobs: bool
) -> AsyncIterator[Chunk]:
    """Legacy `text_completion` chunks; logprob offsets count from the start of the echoed prompt."""
    chunks = ChunkFactory(model, chat=False, include_usage=include_usage)
    offset = 0
    async for event in events:
        if isinstance(event, TextDelta) and (event.text or event.logprobs):
            entries = completion_logprobs(event.logprobs, offset) if logprobs and event.logprobs else None
            yield chunks.chunk({"index": 0, "text": event.text, "logprobs": entries, "finish_reason": None})
            offset += len(event.text)
        elif isinstance(event, Finish):
            yield chunks.chunk({"index": 0, "text": "", "logprobs": None, "finish_reason": event.reason})
        elif isinstance(event, Usage) and include_usage:
            yield chunks.usage_chunk(event)


def chat_message(reply: Reply) -> ChatMessage:
    message: ChatMessage = {"role": "assistant", "content": reply.content}
    if reply.reasoning_content is not None:
        message["reasoning_content"] = reply.reasoning_content
    if reply.tool_calls:
        message["tool_calls"] = [call.model_dump() for call in reply.tool_calls]
    return message


def chat_completion(model: str, reply: Reply, *, logprobs: bool) -> ChatCompletion:
    body: ChatCompletion = {
        "id": new_id("chatcmpl"),
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": chat_message(reply),
                "logprobs": chat_logprobs(reply.logprobs) if logprobs else None,
                "finish_reason": reply.finish.reason if reply.finish else None,
            }
        ],
        "usage": usage(reply.usage),
    }
    if reply.notices:
        body["warnings"] = reply.notices  # not OpenAI's; clients ignore it, people and logs see it
    return body


def text_completion(model: str, reply: Reply, *, logprobs: bool) -> TextCompletion:
    entries = completion_logprobs(reply.logprobs, reply.logprobs_offset or 0) if logprobs else None
    choice: TextChoice = {
        "index": 0,
        "text": reply.text,
        "logprobs": entries,
        "finish_reason": reply.finish.reason if reply.finish else None,
    }
    return {
        "id": new_id("cmpl"),
        "object": "text_completion",
        "created": int(time.time()),
        "model": model,
        "choices": [choice],
        "usage": usage(reply.usage),
    }
