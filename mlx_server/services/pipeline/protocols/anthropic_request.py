"""Anthropic Messages requests -> the pipeline's `GenerationRequest` (blueprint §9).

One inference pipeline serves every protocol: `anthropic_to_internal()` turns a Messages
request into the typed request `generate_chat_completion()` takes (the pipeline's `Message`
and `Tool`); `anthropic_render` renders the pipeline's events back. Ids
survive the round trip: a `tool_use` id becomes the call id, and a `tool_result` becomes a
`role: tool` message with that id.
"""

from __future__ import annotations

import json

from mlx_server.errors import APIError
from mlx_server.schemas.anthropic import (
    ImageBlock,
    MessagesInput,
    MessagesRequest,
    RedactedThinkingBlock,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
)
from mlx_server.schemas.anthropic import Message as AnthropicMessage
from mlx_server.schemas.openai import FunctionCall, ToolCall
from mlx_server.services.pipeline.engine.params import GenerationParams, SamplingParams
from mlx_server.services.pipeline.model_defaults import DEFAULTABLE_SAMPLING
from mlx_server.services.pipeline.request import (
    ContentPart,
    GenerationRequest,
    ImagePart,
    Message,
    TextPart,
    Tool,
    ToolChoice,
    text_or_parts,
)


class ProtocolTranslator:
    """Stateless; one instance serves every request."""

    # --- Requests ---

    def anthropic_to_internal(self, request: MessagesInput, model: str) -> GenerationRequest:
        """The pipeline's request for `model` (the local id the request's model resolved to);
        a token count (no max_tokens, no sampling) gets default generation parameters."""
        system = _system_text(request)
        messages = [Message("system", system)] if system else []
        for index, message in enumerate(request.messages):
            if message.role == "user":
                messages.extend(_user_messages(message, index))
            elif message.role == "assistant":
                messages.append(_assistant_message(message, index))
        tools = (
            tuple(Tool(t.name, t.description or None, t.input_schema) for t in request.tools or ()) or None
        )
        choice = request.tool_choice
        if choice is not None and choice.type in ("any", "tool") and not tools:
            raise APIError(
                400, f'tool_choice "{choice.type}" requires tools, but none were given.', param="tool_choice"
            )
        params = (
            self.generation_params(request) if isinstance(request, MessagesRequest) else GenerationParams()
        )
        return GenerationRequest(
            model=model,
            params=params,
            messages=tuple(messages),
            tools=tools,
            tool_choice=_tool_choice(request),
            parallel_tool_calls=not (choice is not None and choice.disable_parallel_tool_use),
            enable_thinking=_thinking_toggle(request),
        )

    def generation_params(self, request: MessagesRequest) -> GenerationParams:
        thinking = request.thinking
        budget = thinking.budget_tokens if thinking is not None and thinking.type == "enabled" else None
        if budget is not None and budget >= request.max_tokens:
            raise APIError(
                400, "thinking.budget_tokens must be less than max_tokens.", param="thinking.budget_tokens"
            )
        return GenerationParams(
            max_tokens=request.max_tokens,
            # Clients written for Claude send 32k-64k by habit; against a smaller local context
            # that is a ceiling, not a demand to reject.
            max_tokens_is_ceiling=True,
            stop=list(request.stop_sequences or []),
            sampling=SamplingParams(
                temperature=request.temperature,
                top_p=request.top_p if request.top_p is not None else 1.0,
                top_k=request.top_k or 0,
            ),
            defaultable=DEFAULTABLE_SAMPLING - request.model_fields_set,
        )


# --- Request conversion helpers ---


def _system_text(request: MessagesInput) -> str:
    """The system prompt: the `system` field, then any `role: system` messages, in order."""
    parts: list[str] = []
    if isinstance(request.system, str):
        parts.append(request.system)
    elif request.system:
        parts.append("\n\n".join(block.text for block in request.system))
    for index, message in enumerate(request.messages):
        if message.role != "system":
            continue
        if isinstance(message.content, str):
            parts.append(message.content)
            continue
        for position, block in enumerate(message.content):
            if not isinstance(block, TextBlock):
                raise _bad_block(index, position, block.type, "system")
            parts.append(block.text)
    return "\n\n".join(p for p in parts if p)


def _user_messages(message: AnthropicMessage, index: int) -> list[Message]:
    """Tool results become `role: tool` messages (first, as the pipeline expects them right
    after the assistant's calls); the rest stays one user message."""
    if isinstance(message.content, str):
        return [Message("user", message.content)]
    results: list[Message] = []
    parts: list[ContentPart] = []
    for position, block in enumerate(message.content):
        if isinstance(block, ToolResultBlock):
            results.append(Message("tool", _result_content(block), tool_call_id=block.tool_use_id))
        elif isinstance(block, TextBlock):
            parts.append(TextPart(block.text))
        elif isinstance(block, ImageBlock):
            parts.append(_image_part(block))
        else:
            raise _bad_block(index, position, block.type, "user")
    if parts:
        results.append(Message("user", text_or_parts(parts)))
    return results


def _assistant_message(message: AnthropicMessage, index: int) -> Message:
    if isinstance(message.content, str):
        return Message("assistant", message.content)
    texts: list[str] = []
    reasoning: list[str] = []
    calls: list[ToolCall] = []
    for position, block in enumerate(message.content):
        if isinstance(block, TextBlock):
            texts.append(block.text)
        elif isinstance(block, ThinkingBlock):
            reasoning.append(block.thinking)
        elif isinstance(block, RedactedThinkingBlock):
            continue  # encrypted by Anthropic: nothing a local model can read
        elif isinstance(block, ToolUseBlock):
            arguments = json.dumps(block.input, ensure_ascii=False)
            calls.append(ToolCall(id=block.id, function=FunctionCall(name=block.name, arguments=arguments)))
        else:
            raise _bad_block(index, position, block.type, "assistant")
    return Message(
        "assistant",
        "".join(texts) or None,
        tool_calls=tuple(calls),
        reasoning="\n\n".join(reasoning) if reasoning else None,
    )


def _result_content(block: ToolResultBlock) -> str | tuple[ContentPart, ...]:
    prefix = "Error: " if block.is_error else ""
    if isinstance(block.content, str):
        return prefix + block.content
    parts = [TextPart(b.text) if isinstance(b, TextBlock) else _image_part(b) for b in block.content]
    content = text_or_parts(parts)
    if isinstance(content, str):
        return prefix + content
    return (TextPart(prefix), *content) if prefix else content


def _image_part(block: ImageBlock) -> ImagePart:
    source = block.source
    url = source.url if source.type == "url" else f"data:{source.media_type};base64,{source.data}"
    return ImagePart(url)


def _tool_choice(request: MessagesInput) -> ToolChoice:
    """Anthropic's tool_choice (auto, any, tool, none) decoded."""
    choice = request.tool_choice
    if choice is None or choice.type == "auto":
        return ToolChoice()
    if choice.type == "any":
        return ToolChoice("required")
    if choice.type == "tool":
        if not choice.name:
            raise APIError(400, 'tool_choice "tool" needs the name of a tool.', param="tool_choice.name")
        return ToolChoice.named(choice.name)
    return ToolChoice("none")


def _thinking_toggle(request: MessagesInput) -> bool | None:
    """enabled/disabled switch a template's thinking toggle; otherwise the model's default
    (a reasoning model is trained to think; a client that wants none says "disabled")."""
    if request.thinking is None or request.thinking.type == "adaptive":
        return None
    return request.thinking.type == "enabled"


def _bad_block(index: int, position: int, kind: str, role: str) -> APIError:
    return APIError(
        400,
        f"A {role} message cannot contain a {kind!r} block.",
        param=f"messages[{index}].content[{position}]",
    )
