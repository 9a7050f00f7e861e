"""OpenAI Responses API requests (POST /v1/responses): `input` as text or typed items.

The items a client sends (and replays from earlier outputs) are messages with `input_text` /
`input_image` / `output_text` parts, `function_call`, `function_call_output` and `reasoning`;
anything else is a 400 naming the item. Tools are function tools only (the hosted ones,
web search and the like, need OpenAI's cloud). Fields we have no use for (`include`, `user`,
`truncation`, ...) are ignored, as for chat completions.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag, field_validator

from mlx_server.schemas.limits import (
    MAX_ID_CHARS,
    MAX_MESSAGES,
    MAX_MODEL_NAME_CHARS,
    MAX_NAME_CHARS,
    MAX_TOOLS,
    TextOnly,
    check_tool_sizes,
)

# OpenAI's limit on function and json_schema format names.
MAX_FUNCTION_NAME_CHARS = 64
ItemId = Annotated[str, Field(max_length=MAX_ID_CHARS)]

ITEM_TYPES = ("message", "function_call", "function_call_output", "reasoning")


class _Item(BaseModel):
    # Replayed output items carry fields we do not read (status, annotations, logprobs).
    model_config = ConfigDict(extra="ignore")


class InputText(_Item):
    type: Literal["input_text"]
    text: str


class OutputText(_Item):
    """An assistant message's text, as a client replays it from an earlier response."""

    type: Literal["output_text"]
    text: str


class Refusal(_Item):
    type: Literal["refusal"]
    refusal: str


class InputImage(_Item):
    type: Literal["input_image"]
    image_url: str | None = None
    file_id: str | None = None
    detail: Literal["low", "high", "auto", "original"] | None = None


def _by_type(kinds: tuple[str, ...], error_type: str, message: str) -> Discriminator:
    """Picks a union member by the value's `type` (a bare {"role", "content"} is a message,
    OpenAI's "easy" form); any other type is one clear error, not one per member."""

    def kind_of(value: Any) -> str | None:
        kind = value.get("type") if isinstance(value, dict) else getattr(value, "type", None)
        if kind is None and isinstance(value, dict) and "role" in value:
            kind = "message"
        return kind if kind in kinds else None

    return Discriminator(kind_of, custom_error_type=error_type, custom_error_message=message)


ContentPart = Annotated[
    Annotated[InputText, Tag("input_text")]
    | Annotated[InputImage, Tag("input_image")]
    | Annotated[OutputText, Tag("output_text")]
    | Annotated[Refusal, Tag("refusal")],
    _by_type(
        ("input_text", "input_image", "output_text", "refusal"),
        "invalid_content_type",
        "unknown content part type; a part is input_text, input_image, output_text or refusal "
        "(input_file needs OpenAI's file store)",
    ),
]


class MessageItem(_Item):
    type: Literal["message"] = "message"
    id: ItemId | None = None
    role: Literal["user", "assistant", "system", "developer"]
    content: str | list[ContentPart]


class FunctionCallItem(_Item):
    type: Literal["function_call"]
    id: ItemId | None = None
    call_id: str = Field(min_length=1, max_length=MAX_ID_CHARS)
    name: str = Field(min_length=1, max_length=MAX_NAME_CHARS)
    arguments: str = "{}"


class FunctionCallOutputItem(_Item):
    type: Literal["function_call_output"]
    id: ItemId | None = None
    call_id: str = Field(min_length=1, max_length=MAX_ID_CHARS)
    output: str | list[InputText | InputImage]


class SummaryText(_Item):
    type: Literal["summary_text"] = "summary_text"
    text: str


class ReasoningItem(_Item):
    type: Literal["reasoning"]
    id: ItemId | None = None
    summary: list[SummaryText] = Field(default_factory=list)


InputItem = Annotated[
    Annotated[MessageItem, Tag("message")]
    | Annotated[FunctionCallItem, Tag("function_call")]
    | Annotated[FunctionCallOutputItem, Tag("function_call_output")]
    | Annotated[ReasoningItem, Tag("reasoning")],
    _by_type(
        ITEM_TYPES,
        "invalid_item_type",
        "unknown input item type; an item is a message (role and content), "
        "function_call, function_call_output or reasoning",
    ),
]


class FunctionTool(BaseModel):
    model_config = ConfigDict(extra="ignore")

    type: Literal["function"]
    name: str = Field(min_length=1, max_length=MAX_FUNCTION_NAME_CHARS)
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class NamedFunction(BaseModel):
    type: Literal["function"]
    name: str = Field(min_length=1, max_length=MAX_FUNCTION_NAME_CHARS)


class TextFormat(BaseModel):
    """`text.format`: plain text, any JSON object, or JSON matching `schema`."""

    model_config = ConfigDict(extra="ignore")

    type: Literal["text", "json_object", "json_schema"] = "text"
    name: str | None = Field(default=None, max_length=MAX_FUNCTION_NAME_CHARS)
    # "schema" shadows a BaseModel attribute, hence the alias.
    json_schema: dict[str, Any] | None = Field(default=None, alias="schema")
    strict: bool | None = None


class TextConfig(BaseModel):
    model_config = ConfigDict(extra="ignore")

    format: TextFormat = Field(default_factory=TextFormat)


class ReasoningConfig(BaseModel):
    model_config = ConfigDict(extra="ignore")

    effort: Literal["none", "minimal", "low", "medium", "high", "xhigh"] | None = None
    summary: Literal["auto", "concise", "detailed"] | None = None


class ResponseRequest(TextOnly):
    """POST /v1/responses."""

    model_config = ConfigDict(extra="ignore")

    model: str = Field(min_length=1, max_length=MAX_MODEL_NAME_CHARS)
    input: str | list[InputItem] = Field(max_length=MAX_MESSAGES)
    instructions: str | None = None
    tools: list[FunctionTool] | None = Field(default=None, max_length=MAX_TOOLS)
    tool_choice: Literal["auto", "none", "required"] | NamedFunction | None = None
    parallel_tool_calls: bool = True
    text: TextConfig | None = None
    reasoning: ReasoningConfig | None = None
    max_output_tokens: int | None = Field(default=None, ge=1)
    temperature: float = Field(default=1.0, ge=0.0, le=2.0)
    top_p: float = Field(default=1.0, gt=0.0, le=1.0)
    metadata: dict[str, str] | None = Field(default=None, max_length=16)
    store: bool = True
    stream: bool = False
    previous_response_id: str | None = Field(default=None, max_length=MAX_ID_CHARS)

    @field_validator("tools", mode="before")
    @classmethod
    def _function_tools_only(cls, value: Any) -> Any:
        for index, tool in enumerate(value if isinstance(value, list) else []):
            kind = tool.get("type") if isinstance(tool, dict) else None
            if kind != "function":
                raise ValueError(
                    f"tools[{index}] has type {kind!r}: only function tools "
                    '({"type": "function", "name", "parameters"}) run on a local model'
                )
        check_tool_sizes(value)
        return value

    @field_validator("metadata")
    @classmethod
    def _metadata_sizes(cls, value: dict[str, str] | None) -> dict[str, str] | None:
        for key, text in (value or {}).items():
            if len(key) > 64 or len(text) > 512:
                raise ValueError("metadata keys are at most 64 characters and values at most 512")
        return value

    @property
    def thinking_toggle(self) -> bool | None:
        """reasoning.effort as the template's thinking switch: "none" off, any effort on,
        nothing said: the model's default."""
        effort = self.reasoning.effort if self.reasoning is not None else None
        return None if effort is None else effort != "none"
