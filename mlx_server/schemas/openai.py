"""OpenAI API types (one canonical model per concept).

Requests are validated here; the endpoints hand the service plain dicts that keep every
field a client sent (blueprint §3). `ToolCall` / `FunctionCall` are the canonical tool-call
types: parsers produce them and responses serialize them (blueprint §7.3).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from mlx_server.config import MAX_PROMPT_LOOKUP_TOKENS
from mlx_server.schemas.limits import (
    MAX_ID_CHARS,
    MAX_MESSAGES,
    MAX_MODEL_NAME_CHARS,
    MAX_NAME_CHARS,
    MAX_SEED,
    MAX_TOOLS,
    MAX_USER_CHARS,
    TextOnly,
    check_name_length,
    check_stop_strings,
    check_tool_sizes,
)

# OpenAI's own limit on stop sequences.
MAX_OPENAI_STOPS = 4


class ModelObject(BaseModel):
    # Extra fields a model may carry: `sharded` (strategy, ranks, nodes) for one served by a
    # group of ranks (mlx_server/distributed).
    model_config = ConfigDict(extra="allow")

    id: str
    object: Literal["model"] = "model"
    created: int
    owned_by: str


class ModelList(BaseModel):
    object: Literal["list"] = "list"
    data: list[ModelObject]


class FunctionCall(BaseModel):
    name: str
    # A JSON text, as OpenAI sends it (clients json.loads it).
    arguments: str = "{}"


class ToolCall(BaseModel):
    id: str
    type: Literal["function"] = "function"
    function: FunctionCall


class ChatMessage(BaseModel):
    """One message of the conversation; unknown fields are kept and passed on."""

    model_config = ConfigDict(extra="allow")

    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[dict[str, Any]] | None = None
    name: str | None = Field(default=None, max_length=MAX_NAME_CHARS)
    tool_calls: list[ToolCall] | None = None
    tool_call_id: str | None = Field(default=None, max_length=MAX_ID_CHARS)

    @field_validator("tool_calls")
    @classmethod
    def _call_sizes(cls, value: list[ToolCall] | None) -> list[ToolCall] | None:
        for call in value or []:  # ToolCall is also the model's output type: bounded here only
            if len(call.id) > MAX_ID_CHARS:
                raise ValueError(f"a tool call id may have at most {MAX_ID_CHARS} characters")
            check_name_length(call.function.name, "a function name")
        return value


class StreamOptions(BaseModel):
    include_usage: bool = False


class Prediction(BaseModel):
    """OpenAI's Predicted Outputs: text the reply is expected to repeat (a file being edited);
    here it joins the prompt as a source of prompt lookup's drafts."""

    type: Literal["content"]
    content: str | list[dict[str, Any]]  # bounded by the body's size, like message content

    @property
    def text(self) -> str:
        if isinstance(self.content, str):
            return self.content
        return "".join(str(part.get("text", "")) for part in self.content if part.get("type") == "text")


class SamplingFields(TextOnly):
    """Sampling parameters shared by chat and legacy completions.

    Besides OpenAI's own, the extensions llama.cpp, vLLM and LM Studio accept: top_k, min_p,
    repetition_penalty.
    """

    # Clients send fields we have no use for (metadata, store, ...); ignore them as other
    # OpenAI-compatible servers do rather than failing the request. `user` is read only to be
    # bounded, like every string a client may expect to see again.
    model_config = ConfigDict(extra="ignore")

    model: str = Field(min_length=1, max_length=MAX_MODEL_NAME_CHARS)
    temperature: float = Field(default=1.0, ge=0.0, le=2.0)
    top_p: float = Field(default=1.0, gt=0.0, le=1.0)
    top_k: int = Field(default=0, ge=0)
    min_p: float = Field(default=0.0, ge=0.0, le=1.0)
    repetition_penalty: float | None = Field(default=None, gt=0.0)
    presence_penalty: float = Field(default=0.0, ge=-2.0, le=2.0)
    frequency_penalty: float = Field(default=0.0, ge=-2.0, le=2.0)
    logit_bias: dict[int, float] | None = None
    seed: int | None = Field(default=None, ge=0, le=MAX_SEED)
    stop: str | list[str] | None = None
    n: int = Field(default=1, ge=1)
    user: str | None = Field(default=None, max_length=MAX_USER_CHARS)
    stream: bool = False
    stream_options: StreamOptions | None = None
    # Ours: prompt lookup's drafted tokens per step (0 turns it off; None: the model's default).
    prompt_lookup: int | None = Field(default=None, ge=0, le=MAX_PROMPT_LOOKUP_TOKENS)

    @field_validator("logit_bias")
    @classmethod
    def _bias_range(cls, value: dict[int, float] | None) -> dict[int, float] | None:
        for token, bias in (value or {}).items():
            if not -100.0 <= bias <= 100.0:
                raise ValueError(f"bias for token {token} must be between -100 and 100, got {bias}")
        return value

    @field_validator("stop")
    @classmethod
    def _stop_list(cls, value: str | list[str] | None) -> str | list[str] | None:
        check_stop_strings([value] if isinstance(value, str) else value or [], MAX_OPENAI_STOPS)
        return value

    @property
    def stop_list(self) -> list[str]:
        return [self.stop] if isinstance(self.stop, str) else list(self.stop or [])

    @property
    def include_usage(self) -> bool:
        return bool(self.stream_options and self.stream_options.include_usage)


class ThinkingSwitch(BaseModel):
    """Thinking on/off for templates that support the toggle (Qwen3, GLM): the vLLM-style
    chat_template_kwargs, or the shorter top-level form (chat and /tokenize requests)."""

    enable_thinking: bool | None = None
    chat_template_kwargs: dict[str, Any] | None = None

    @property
    def thinking_toggle(self) -> bool | None:
        if self.enable_thinking is not None:
            return self.enable_thinking
        value = (self.chat_template_kwargs or {}).get("enable_thinking")
        return value if isinstance(value, bool) else None


class ChatCompletionRequest(SamplingFields, ThinkingSwitch):
    messages: list[ChatMessage] = Field(min_length=1, max_length=MAX_MESSAGES)
    max_tokens: int | None = Field(default=None, ge=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    logprobs: bool = False
    top_logprobs: int | None = Field(default=None, ge=0, le=20)
    tools: list[dict[str, Any]] | None = Field(default=None, max_length=MAX_TOOLS)
    tool_choice: str | dict[str, Any] | None = None
    parallel_tool_calls: bool | None = None
    response_format: dict[str, Any] | None = None
    prediction: Prediction | None = None

    @field_validator("tools")
    @classmethod
    def _tool_sizes(cls, value: list[dict[str, Any]] | None) -> list[dict[str, Any]] | None:
        for index, tool in enumerate(value or []):
            function = tool.get("function")
            name = function.get("name") if isinstance(function, dict) else None
            check_name_length(name, f"tool {index}'s name")
        check_tool_sizes(value)
        return value

    @field_validator("tool_choice")
    @classmethod
    def _choice_size(cls, value: str | dict[str, Any] | None) -> str | dict[str, Any] | None:
        if isinstance(value, str) and len(value) > MAX_NAME_CHARS:
            raise ValueError('tool_choice must be "auto", "none", "required" or a named function')
        function = value.get("function") if isinstance(value, dict) else None
        check_name_length(function.get("name") if isinstance(function, dict) else None, "the function name")
        return value


class CompletionRequest(SamplingFields):
    prompt: str | list[str] | list[int] | list[list[int]]
    max_tokens: int | None = Field(default=16, ge=1)
    echo: bool = False
    suffix: str | None = None
    best_of: int | None = Field(default=None, ge=1)
    logprobs: int | None = Field(default=None, ge=0, le=5)
