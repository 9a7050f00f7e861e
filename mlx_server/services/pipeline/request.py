"""The pipeline's input: one typed request, whichever protocol (or the playground) asked."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from mlx_server.schemas.openai import ToolCall
from mlx_server.services.pipeline.engine.params import GenerationParams

ToolMode = Literal["auto", "none", "required"]


@dataclass(frozen=True)
class ToolChoice:
    """Which tool calls a reply must make, decoded once per protocol into this one type: "auto"
    (the model decides), "none" (no call: tools are not shown), "required" (at least one call),
    and for a named choice the one `function` every call must be (then `mode` is "required")."""

    mode: ToolMode = "auto"
    function: str | None = None

    @classmethod
    def named(cls, function: str) -> ToolChoice:
        return cls("required", function)

    @property
    def requires_call(self) -> bool:
        return self.mode == "required"

    @property
    def offers_tools(self) -> bool:
        return self.mode != "none"

    def as_openai(self) -> str | dict[str, Any]:
        """OpenAI's wire form (a remote backend's request)."""
        if self.function is not None:
            return {"type": "function", "function": {"name": self.function}}
        return self.mode

    def as_anthropic(self) -> dict[str, str]:
        """Anthropic's wire form (a remote backend's request)."""
        if self.function is not None:
            return {"type": "tool", "name": self.function}
        return {"type": "any" if self.mode == "required" else self.mode}


@dataclass(frozen=True)
class OutputFormat:
    """What a reply must be (response_format): JSON, its schema, and the grammar that keeps it so
    (structured_output.py builds it; `param` names the request field for errors)."""

    kind: str  # "json_object" | "json_schema"
    schema: dict[str, Any]
    grammar: str
    param: str


@dataclass(frozen=True)
class ImagePart:
    """One image of a chat: a `data:` or http(s) URL, in the order the conversation shows it.
    OpenAI `image_url` parts and Anthropic `image` blocks (base64 as a data: URL) both become
    this; `detail` is OpenAI's hint, kept for the record (the model's processor decides the
    resolution)."""

    url: str
    detail: str | None = None


@dataclass(frozen=True)
class TextPart:
    text: str


ContentPart = TextPart | ImagePart
Role = Literal["system", "developer", "user", "assistant", "tool"]


@dataclass(frozen=True)
class Message:
    """One message of a conversation, whichever protocol sent it: its text (or text and image
    parts in order), an assistant's tool calls and reasoning, a tool result's call id. Each
    protocol's request module builds these; `as_openai()` is the form chat templates (and an
    OpenAI-compatible upstream) read."""

    role: Role
    content: str | tuple[ContentPart, ...] | None = None
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None
    name: str | None = None
    reasoning: str | None = None

    @property
    def images(self) -> tuple[ImagePart, ...]:
        content = self.content if isinstance(self.content, tuple) else ()
        return tuple(part for part in content if isinstance(part, ImagePart))

    def as_openai(self) -> dict[str, Any]:
        """The OpenAI chat message: what `tokenizer.apply_chat_template` and upstreams read."""
        shape: dict[str, Any] = {"role": self.role, "content": _openai_content(self.content)}
        if self.reasoning is not None:
            shape["reasoning_content"] = self.reasoning
        if self.tool_calls:
            shape["tool_calls"] = [call.model_dump() for call in self.tool_calls]
        if self.tool_call_id is not None:
            shape["tool_call_id"] = self.tool_call_id
        if self.name is not None:
            shape["name"] = self.name
        return shape


def _openai_content(content: str | tuple[ContentPart, ...] | None) -> str | list[object] | None:
    if not isinstance(content, tuple):
        return content
    parts: list[object] = []
    for part in content:
        if isinstance(part, TextPart):
            parts.append({"type": "text", "text": part.text})
        else:
            image = {"url": part.url} if part.detail is None else {"url": part.url, "detail": part.detail}
            parts.append({"type": "image_url", "image_url": image})
    return parts


def text_or_parts(parts: Sequence[ContentPart]) -> str | tuple[ContentPart, ...]:
    """Content as protocols without parts send it: the texts joined by a blank line when there
    is no image, else the parts in order."""
    if all(isinstance(part, TextPart) for part in parts):
        return "\n\n".join(part.text for part in parts if isinstance(part, TextPart))
    return tuple(parts)


@dataclass(frozen=True)
class Tool:
    """One function the model may call: its name, what it does, and a JSON Schema of its
    arguments (None: the client sent none; any arguments pass)."""

    name: str
    description: str | None = None
    parameters: Mapping[str, Any] | None = None

    def as_openai(self) -> dict[str, Any]:
        """OpenAI's tool definition: what chat templates and tool-call grammars read."""
        function: dict[str, Any] = {"name": self.name}
        if self.description:
            function["description"] = self.description
        if self.parameters is not None:
            function["parameters"] = dict(self.parameters)
        return {"type": "function", "function": function}


@dataclass(frozen=True)
class GenerationRequest:
    """What to generate. A chat request carries `messages` (rendered through the model's chat
    template, with `tools`); a legacy completion carries a raw
    `prompt` (text or token ids) and may `echo` it. Tools, tool_choice, thinking and the output
    format apply to chats only."""

    model: str
    params: GenerationParams = field(default_factory=GenerationParams)
    messages: tuple[Message, ...] | None = None
    prompt: str | list[int] | None = None
    echo: bool = False
    tools: tuple[Tool, ...] | None = None
    tool_choice: ToolChoice = field(default_factory=ToolChoice)
    parallel_tool_calls: bool = True
    output_format: OutputFormat | None = None
    enable_thinking: bool | None = None
    # A tool call the checker rejects comes back as the model's text (content); the playground,
    # whose loop feeds the rejection back to the model as the call's result, turns it off.
    rejected_calls_as_content: bool = True

    # The images of `messages`, in order (filled from them; a vision model reads them).
    images: tuple[ImagePart, ...] = field(init=False, default=())

    def __post_init__(self) -> None:
        if (self.messages is None) == (self.prompt is None):
            raise ValueError("A GenerationRequest has either messages (chat) or a prompt (completion).")
        images = tuple(image for message in self.messages or () for image in message.images)
        object.__setattr__(self, "images", images)
