"""Anthropic Messages API types: requests validated here, responses built from them.

Unknown fields are ignored (clients send `cache_control`, `citations`, `service_tier`,
`container`, ... that have no meaning for a local model); unknown content block types and
tool choices are errors that name the accepted ones.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from mlx_server.schemas.limits import (
    MAX_ID_CHARS,
    MAX_MESSAGES,
    MAX_MODEL_NAME_CHARS,
    MAX_NAME_CHARS,
    MAX_STOP_SEQUENCES,
    MAX_TOOLS,
    MAX_USER_CHARS,
    TextOnly,
    check_stop_strings,
    check_tool_sizes,
)

# --- Content blocks ---


class _Block(BaseModel):
    model_config = ConfigDict(extra="ignore")


class TextBlock(_Block):
    type: Literal["text"] = "text"
    text: str


class Base64ImageSource(_Block):
    type: Literal["base64"]
    media_type: str
    data: str


class URLImageSource(_Block):
    type: Literal["url"]
    url: str


class ImageBlock(_Block):
    type: Literal["image"]
    source: Annotated[Base64ImageSource | URLImageSource, Field(discriminator="type")]


class ToolUseBlock(_Block):
    type: Literal["tool_use"] = "tool_use"
    id: str = Field(min_length=1, max_length=MAX_ID_CHARS)
    name: str = Field(min_length=1, max_length=MAX_NAME_CHARS)
    input: dict[str, Any] = Field(default_factory=dict)


class ToolResultBlock(_Block):
    type: Literal["tool_result"]
    tool_use_id: str = Field(min_length=1, max_length=MAX_ID_CHARS)
    content: str | list[Annotated[TextBlock | ImageBlock, Field(discriminator="type")]] = ""
    is_error: bool = False


class ThinkingBlock(_Block):
    type: Literal["thinking"] = "thinking"
    thinking: str
    # Opaque: Anthropic's proof that it wrote the block. Kept as received, never checked.
    signature: str = ""


class RedactedThinkingBlock(_Block):
    type: Literal["redacted_thinking"]
    data: str


ContentBlock = Annotated[
    TextBlock | ImageBlock | ToolUseBlock | ToolResultBlock | ThinkingBlock | RedactedThinkingBlock,
    Field(discriminator="type"),
]


class Message(_Block):
    # "system" is not in Anthropic's spec, but newer Claude Code sends it inside `messages`.
    role: Literal["user", "assistant", "system"]
    content: str | list[ContentBlock]


# --- Tools ---


class Tool(_Block):
    name: str = Field(min_length=1, max_length=MAX_NAME_CHARS)
    description: str | None = None
    input_schema: dict[str, Any]
    # Client tools only; Anthropic's server tools (web search, code execution) run in its cloud.
    type: Literal["custom"] | None = None


class ToolChoice(_Block):
    type: Literal["auto", "any", "tool", "none"]
    name: str | None = Field(default=None, max_length=MAX_NAME_CHARS)
    disable_parallel_tool_use: bool = False


class ThinkingConfig(_Block):
    type: Literal["enabled", "disabled", "adaptive"]
    budget_tokens: int | None = Field(default=None, ge=1)


# --- Requests ---


class Metadata(_Block):
    """Anthropic's request metadata: an opaque id of the end user (its limit is Anthropic's)."""

    user_id: str | None = Field(default=None, max_length=MAX_USER_CHARS)


class MessagesInput(TextOnly):
    """What both /v1/messages and /v1/messages/count_tokens read: the prompt."""

    model_config = ConfigDict(extra="ignore")

    model: str = Field(min_length=1, max_length=MAX_MODEL_NAME_CHARS)
    messages: list[Message] = Field(min_length=1, max_length=MAX_MESSAGES)
    system: str | list[TextBlock] | None = None
    tools: list[Tool] | None = Field(default=None, max_length=MAX_TOOLS)
    tool_choice: ToolChoice | None = None
    thinking: ThinkingConfig | None = None

    @field_validator("tools")
    @classmethod
    def _tool_sizes(cls, value: list[Tool] | None) -> list[Tool] | None:
        check_tool_sizes(value)
        return value

    @field_validator("tool_choice")
    @classmethod
    def _named_choice(cls, value: ToolChoice | None) -> ToolChoice | None:
        if value is not None and value.type == "tool" and not value.name:
            raise ValueError('a tool_choice of type "tool" needs the tool\'s "name"')
        return value


class MessagesRequest(MessagesInput):
    max_tokens: int = Field(ge=1)
    stop_sequences: list[str] | None = None
    temperature: float = Field(default=1.0, ge=0.0, le=1.0)
    top_p: float | None = Field(default=None, gt=0.0, le=1.0)
    top_k: int | None = Field(default=None, ge=0)
    stream: bool = False
    metadata: Metadata | None = None

    @field_validator("stop_sequences")
    @classmethod
    def _stop_sizes(cls, value: list[str] | None) -> list[str] | None:
        check_stop_strings(value or [], MAX_STOP_SEQUENCES)
        return value


# --- Responses ---

StopReason = Literal["end_turn", "max_tokens", "stop_sequence", "tool_use"]


class Usage(BaseModel):
    input_tokens: int
    output_tokens: int
    cache_creation_input_tokens: int | None = None
    cache_read_input_tokens: int | None = None


class MessageResponse(BaseModel):
    id: str
    type: Literal["message"] = "message"
    role: Literal["assistant"] = "assistant"
    model: str
    content: list[TextBlock | ThinkingBlock | ToolUseBlock]
    stop_reason: StopReason | None
    stop_sequence: str | None = None
    usage: Usage


class TokenCount(BaseModel):
    input_tokens: int
