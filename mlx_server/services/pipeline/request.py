"""The pipeline's input: one typed request, whichever protocol (or the playground) asked."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from mlx_server.errors import APIError
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


def image_parts(messages: list[dict[str, Any]]) -> tuple[ImagePart, ...]:
    """The images of OpenAI-format messages, in order; a malformed image part is a 400 naming it."""
    images: list[ImagePart] = []
    for index, message in enumerate(messages):
        content = message.get("content")
        if not isinstance(content, list):
            continue
        for position, part in enumerate(content):
            if not isinstance(part, dict) or part.get("type") != "image_url":
                continue
            image_url = part.get("image_url")
            url = image_url.get("url") if isinstance(image_url, dict) else image_url
            if not isinstance(url, str) or not url:
                raise APIError(
                    400,
                    'An image_url part needs {"image_url": {"url": "data:image/png;base64,..." or "https://..."}}.',
                    param=f"messages[{index}].content[{position}].image_url",
                )
            detail = image_url.get("detail") if isinstance(image_url, dict) else None
            images.append(ImagePart(url=url, detail=detail if isinstance(detail, str) else None))
    return tuple(images)


@dataclass(frozen=True)
class GenerationRequest:
    """What to generate. A chat request carries `messages` (OpenAI-format message dicts, every
    field kept, rendered through the model's chat template); a legacy completion carries a raw
    `prompt` (text or token ids) and may `echo` it. Tools, tool_choice, thinking and the output
    format apply to chats only."""

    model: str
    params: GenerationParams = field(default_factory=GenerationParams)
    messages: list[dict[str, Any]] | None = None
    prompt: str | list[int] | None = None
    echo: bool = False
    tools: list[dict[str, Any]] | None = None
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
        object.__setattr__(self, "images", image_parts(self.messages or []))
