"""Ollama API request types (/api/chat, /api/generate, /api/embed, /api/embeddings, /api/show).

Unknown top-level fields and unknown `options` are ignored, as Ollama ignores them (its load-time
options, num_ctx, num_gpu, use_mmap..., have no meaning for a model the pool loads); a known
field of the wrong type is a 400 naming it. `stream` defaults to true, as in Ollama.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from mlx_server.schemas.limits import (
    MAX_MESSAGES,
    MAX_MODEL_NAME_CHARS,
    MAX_NAME_CHARS,
    MAX_SEED,
    MAX_STOP_SEQUENCES,
    MAX_TOOLS,
    TextOnly,
    check_name_length,
    check_stop_strings,
    check_tool_sizes,
)

# "json", a JSON Schema object, or "" / null for plain text.
OutputFormatField = Literal["", "json"] | dict[str, Any] | None
# A duration ("5m", "1h30m", "-1"), or a number of seconds; negative keeps the model loaded.
KeepAlive = float | Annotated[str, Field(max_length=64)] | None
# A preset's system prompt (as a model's defaults take it) and a chat template sent back.
MAX_SYSTEM_PROMPT_CHARS = 100_000
MAX_TEMPLATE_CHARS = 200_000
# Ollama's own default seed, -1, means a random one (its clients send it with the defaults).
RANDOM_SEED = -1
ModelName = Annotated[str, Field(min_length=1, max_length=MAX_MODEL_NAME_CHARS)]
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
    seed: int | None = Field(default=None, ge=RANDOM_SEED, le=MAX_SEED)
    stop: list[str] | None = None
    repeat_penalty: float | None = Field(default=None, gt=0)
    presence_penalty: float | None = None
    frequency_penalty: float | None = None

    @field_validator("stop", mode="before")
    @classmethod
    def _one_stop(cls, value: Any) -> Any:
        return [value] if isinstance(value, str) else value

    @field_validator("stop")
    @classmethod
    def _stop_sizes(cls, value: list[str] | None) -> list[str] | None:
        check_stop_strings(value or [], MAX_STOP_SEQUENCES)
        return value


class _Generation(_Body, TextOnly):
    model: ModelName
    format: OutputFormatField = None
    options: OllamaOptions | None = None
    stream: bool = True
    keep_alive: KeepAlive = None
    think: ThinkField = None


class OllamaToolCallFunction(_Body):
    name: str = Field(min_length=1, max_length=MAX_NAME_CHARS)
    arguments: dict[str, Any] = Field(default_factory=dict)


class OllamaToolCall(_Body):
    function: OllamaToolCallFunction


class OllamaMessage(_Body):
    role: Literal["system", "user", "assistant", "tool"]
    content: str | None = ""
    images: list[str] | None = None
    tool_calls: list[OllamaToolCall] | None = None
    # A tool result names the tool it answers (Ollama has no call ids).
    tool_name: str | None = Field(default=None, max_length=MAX_NAME_CHARS)
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
            check_name_length(function["name"], f"tool {index}'s name")
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


class OllamaEmbedRequest(_Body, TextOnly):
    model: ModelName
    input: str | list[str]
    truncate: bool = True
    dimensions: int | None = Field(default=None, ge=1)
    options: OllamaOptions | None = None
    keep_alive: KeepAlive = None


class OllamaEmbeddingsRequest(_Body, TextOnly):
    """The older /api/embeddings: one prompt, one vector."""

    model: ModelName
    prompt: str
    options: OllamaOptions | None = None
    keep_alive: KeepAlive = None


class OllamaShowRequest(_Body, TextOnly):
    model: ModelName
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


class OllamaCopyRequest(_Body, TextOnly):
    source: ModelName
    destination: ModelName


class OllamaCreateRequest(_Body, TextOnly):
    """A named preset (services/operations/model_presets.py): `from` a model, with `system` and
    `parameters` (a Modelfile's SYSTEM and PARAMETER lines). `files`, `adapters`, `messages`,
    `quantize` and the older `modelfile` text are read only to refuse them with what to do."""

    model: ModelName
    from_: ModelName | None = Field(default=None, alias="from")
    system: str | None = Field(default=None, max_length=MAX_SYSTEM_PROMPT_CHARS)
    parameters: dict[str, Any] = Field(default_factory=dict, max_length=64)
    template: str | None = Field(default=None, max_length=MAX_TEMPLATE_CHARS)
    stream: bool = True
    files: dict[str, Any] | None = None
    adapters: dict[str, Any] | None = None
    messages: list[Any] | None = None
    quantize: str | None = Field(default=None, max_length=64)
    modelfile: str | None = Field(default=None, max_length=MAX_TEMPLATE_CHARS)


class OllamaPushRequest(OllamaPullRequest):
    pass
