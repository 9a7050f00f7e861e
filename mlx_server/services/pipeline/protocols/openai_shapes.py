"""OpenAI's chat and legacy completions bodies as TypedDicts: what `openai_render` builds, so
mypy checks every field name and value type it writes (the JSON is unchanged)."""

from __future__ import annotations

from typing import Any, Literal, NotRequired, TypedDict

from mlx_server.services.pipeline.events import FinishReason


class PromptTokensDetails(TypedDict):
    cached_tokens: int  # the prompt tokens the prefix cache already held


class CompletionTokensDetails(TypedDict):
    accepted_prediction_tokens: int  # speculative decoding: the draft's tokens the model kept


class UsageBody(TypedDict):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    prompt_tokens_details: PromptTokensDetails
    completion_tokens_details: NotRequired[CompletionTokensDetails]
    draft_acceptance_rate: NotRequired[float | None]  # not OpenAI's


class TokenEntry(TypedDict):
    token: str
    logprob: float
    bytes: list[int]


class TokenWithTop(TokenEntry):
    top_logprobs: list[TokenEntry]


class ChatLogprobs(TypedDict):
    content: list[TokenWithTop]


class CompletionLogprobs(TypedDict):
    """The legacy completions shape: parallel lists, top alternatives as {token: logprob}."""

    tokens: list[str]
    token_logprobs: list[float]
    top_logprobs: list[dict[str, float]]
    text_offset: list[int]


class FunctionDelta(TypedDict, total=False):
    name: str
    arguments: str


class ToolCallChunk(TypedDict):
    index: int
    id: NotRequired[str]
    type: NotRequired[Literal["function"]]
    function: FunctionDelta


class ChatDelta(TypedDict, total=False):
    role: Literal["assistant"]
    content: str
    reasoning_content: str
    tool_calls: list[ToolCallChunk]


class ChatChunkChoice(TypedDict):
    index: int
    delta: ChatDelta
    logprobs: ChatLogprobs | None
    finish_reason: FinishReason | None


class TextChoice(TypedDict):
    """A legacy completion's choice, whole or streamed."""

    index: int
    text: str
    logprobs: CompletionLogprobs | None
    finish_reason: FinishReason | None


class Chunk(TypedDict):
    """A `chat.completion.chunk` or a streamed `text_completion`."""

    id: str
    object: Literal["chat.completion.chunk", "text_completion"]
    created: int
    model: str
    choices: list[ChatChunkChoice | TextChoice]
    usage: NotRequired[UsageBody | None]  # null on every chunk but the last when usage is asked for
    warnings: NotRequired[list[str]]  # not OpenAI's: the finish chunk's notices


class ChatMessage(TypedDict):
    role: Literal["assistant"]
    content: str | None
    reasoning_content: NotRequired[str]
    tool_calls: NotRequired[list[dict[str, Any]]]  # ToolCall.model_dump(): OpenAI's shape


class ChatChoice(TypedDict):
    index: int
    message: ChatMessage
    logprobs: ChatLogprobs | None
    finish_reason: FinishReason | None


class ChatCompletion(TypedDict):
    id: str
    object: Literal["chat.completion"]
    created: int
    model: str
    choices: list[ChatChoice]
    usage: UsageBody
    warnings: NotRequired[list[str]]  # not OpenAI's; clients ignore it, people and logs see it


class TextCompletion(TypedDict):
    id: str
    object: Literal["text_completion"]
    created: int
    model: str
    choices: list[TextChoice]
    usage: UsageBody
