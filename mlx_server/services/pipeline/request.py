"""The pipeline's input: one typed request, whichever protocol (or the playground) asked."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from mlx_server.services.pipeline.generation import GenerationParams
from mlx_server.services.pipeline.structured_output import OutputFormat

ToolChoice = str | dict[str, Any] | None


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
    tool_choice: ToolChoice = None
    parallel_tool_calls: bool = True
    output_format: OutputFormat | None = None
    enable_thinking: bool | None = None

    def __post_init__(self) -> None:
        if (self.messages is None) == (self.prompt is None):
            raise ValueError("A GenerationRequest has either messages (chat) or a prompt (completion).")
