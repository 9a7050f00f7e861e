"""Ollama API request types (/api/chat, /api/generate, /api/embed, /api/embeddings, /api/show).

Unknown top-level fields and unknown `options` are ignored, as Ollama ignores them (its load-time
options, num_ctx, num_gpu, use_mmap..., have no meaning for a model the pool loads); a known
field of the wrong type is a 400 naming it. `stream` defaults to true, as in Ollama.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from mlx_server.schemas.limits import MAX_MESSAGES, MAX_TOOLS, check_tool_sizes

# "json", a JSON Schema object, or "" / null for plain text.
OutputFormatField = Literal["", "json"] | dict[str, Any] | None
# A duration ("5m", "1h30m", "-1"), or a number of seconds; negative keeps the model loaded.
KeepAlive = float | str | None
ThinkField = bool | Literal["low", "medium", "high"] | None


class _Body(BaseModel):
    model_config = ConfigDict(extra="ignore")


class OllamaOptions(BaseModel):
    """The runtime options that map onto generation; any other option is accepted and ignored."""

    model_config = ConfigDict(extra="allow")

    # -1: until the model stops or the context is full (-2, Ollama's "fill the context", too).
    num_predict: int | None = Field(default=None, ge=-2)
    temperature: float | None = Field(default=None, ge=0)
    top_k: int | None = Field(default=None, ge=0)
    top_p: float | None = Field(default=None, ge=0, le=1)
    min_p: float | None = Field(default=None, ge=0, le=1)
    seed: int | None = None
    stop: list[str] | None = None
    repeat_penalty: float | None = Field(default=None, gt=0)
    presence_penalty: float | None = None
    frequency_penalty: float | None = None

    @field_validator("stop", mode="before")
    @classmethod
    def _one_stop(cls, value: Any) -> Any:
        return [value] if isinstance(value, str) else value


class _Generation(_Body):
    model: str = Field(min_length=1)
    format: OutputFormatField = None
    options: OllamaOptions | None = None
    stream: bool = True
    keep_alive: KeepAlive = None
    think: ThinkField = None


class OllamaToolCallFunction(_Body):
    name: str = Field(min_length=1)
    arguments: dict[str, Any] = Field(default_factory=dict)


class OllamaToolCall(_Body):
    function: OllamaToolCallFunction


class OllamaMessage(_Body):
    role: Literal["system", "user", "assistant", "tool"]
    content: str | None = ""
    images: list[str] | None = None
    tool_calls: list[OllamaToolCall] | None = None
    # A tool result names the tool it answers (Ollama has no call ids).
    tool_name: str | None = None
    thinking: str | None = None


class OllamaChatRequest(_Generation):
    messages: list[OllamaMessage] = Field(default_factory=list, max_length=MAX_MESSAGES)
    tools: list[dict[str, Any]] | None = Field(default=None, max_length=MAX_TOOLS)

    @field_validator("tools")
    @classmethod
    def _tools(cls, value: list[dict[str, Any]] | None) -> list[dict[str, Any]] | None:
        for index, tool in enumerate(value or []):
            function = tool.get("function")
            if not isinstance(function, dict) or not isinstance(function.get("name"), str):
                shape = '{"type": "function", "function": {"name": ..., "parameters": ...}}'
                raise ValueError(f"tool {index} needs {shape}")
        check_tool_sizes(value)
        return value


class OllamaGenerateRequest(_Generation):
    prompt: str = ""
    system: str | None = None
    suffix: str | None = None
    template: str | None = None
    context: list[int] | None = None
    raw: bool = False
    images: list[str] | None = None


class OllamaEmbedRequest(_Body):
    model: str = Field(min_length=1)
    input: str | list[str]
    truncate: bool = True
    dimensions: int | None = Field(default=None, ge=1)
    options: OllamaOptions | None = None
    keep_alive: KeepAlive = None


class OllamaEmbeddingsRequest(_Body):
    """The older /api/embeddings: one prompt, one vector."""

    model: str = Field(min_length=1)
    prompt: str
    options: OllamaOptions | None = None
    keep_alive: KeepAlive = None


class OllamaShowRequest(_Body):
    model: str = Field(min_length=1)
    verbose: bool = False

    @model_validator(mode="before")
    @classmethod
    def _older_name(cls, value: Any) -> Any:
        """Older clients send the model as `name`."""
        if isinstance(value, dict) and "model" not in value and "name" in value:
            return {**value, "model": value["name"]}
        return value


class OllamaPullRequest(OllamaShowRequest):
    """`model` (or the older `name`): a Hugging Face repo id; `insecure` is accepted and unused."""

    stream: bool = True
    insecure: bool = False


class OllamaDeleteRequest(OllamaShowRequest):
    pass


class OllamaCopyRequest(_Body):
    source: str = Field(min_length=1)
    destination: str = Field(min_length=1)


class OllamaPushRequest(OllamaPullRequest):
    pass
