"""POST /tokenize and /detokenize in vLLM's shape (llama-server's counterpart takes `content`)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field, field_validator

from mlx_server.schemas.limits import MAX_MESSAGES, MAX_TOOLS, check_tool_sizes
from mlx_server.schemas.openai import ChatMessage, ThinkingSwitch

# The most token ids one /detokenize request may carry (a long context's worth).
MAX_DETOKENIZE_TOKENS = 1_000_000


class TokenizeRequest(ThinkingSwitch):
    """Either `prompt` (text as it is) or `messages` (through the model's chat template, the
    way a chat request would render them: tools and thinking switch included)."""

    model: str
    prompt: str | None = None
    messages: list[ChatMessage] | None = Field(default=None, max_length=MAX_MESSAGES)
    add_generation_prompt: bool = True
    # None: as generation does (a prompt gets the tokenizer's special tokens, a rendered chat
    # none beyond what its template writes); true/false forces it.
    add_special_tokens: bool | None = None
    tools: list[dict[str, Any]] | None = Field(default=None, max_length=MAX_TOOLS)
    return_token_strs: bool = False

    @field_validator("tools")
    @classmethod
    def _tool_sizes(cls, value: list[dict[str, Any]] | None) -> list[dict[str, Any]] | None:
        check_tool_sizes(value)
        return value


class TokenizeResponse(BaseModel):
    count: int
    max_model_len: int | None
    tokens: list[int]
    token_strs: list[str] | None = None


class DetokenizeRequest(BaseModel):
    model: str
    tokens: list[int] = Field(max_length=MAX_DETOKENIZE_TOKENS)


class DetokenizeResponse(BaseModel):
    prompt: str
