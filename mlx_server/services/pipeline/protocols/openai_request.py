"""An OpenAI chat completions request -> GenerationRequest: its messages and tools as the
pipeline's types, its sampling fields, tool_choice decoded into the pipeline's ToolChoice,
response_format as a grammar, the thinking toggle."""

from __future__ import annotations

from dataclasses import fields
from typing import Any

from mlx_server.errors import APIError
from mlx_server.schemas.openai import ChatCompletionRequest, ChatMessage, SamplingFields
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
    ToolMode,
)
from mlx_server.services.pipeline.structured_output import parse_response_format


def sampling_params(body: SamplingFields) -> SamplingParams:
    """The request's sampling fields, which carry SamplingParams' names."""
    return SamplingParams(**{f.name: getattr(body, f.name) for f in fields(SamplingParams)})


def left_out(body: SamplingFields) -> frozenset[str]:
    """The sampling fields the client did not send: the model's defaults fill them."""
    return DEFAULTABLE_SAMPLING - body.model_fields_set


def chat_messages(messages: list[ChatMessage]) -> tuple[Message, ...]:
    """OpenAI messages as the pipeline's; `reasoning_content` (or `reasoning`), which some
    clients send back with an assistant's turn, is its reasoning."""
    return tuple(
        Message(
            role=message.role,
            content=_content(message.content, f"messages[{index}]"),
            tool_calls=tuple(message.tool_calls or ()),
            tool_call_id=message.tool_call_id,
            name=message.name,
            reasoning=_reasoning(message),
        )
        for index, message in enumerate(messages)
    )


def _reasoning(message: ChatMessage) -> str | None:
    extra = message.model_extra or {}
    value = extra.get("reasoning_content", extra.get("reasoning"))
    return value if isinstance(value, str) else None


def _content(content: str | list[Any] | None, where: str) -> str | tuple[ContentPart, ...] | None:
    if not isinstance(content, list):
        return content
    return tuple(_part(part, f"{where}.content[{position}]") for position, part in enumerate(content))


def _part(part: Any, where: str) -> ContentPart:
    """A text or image_url part; any other kind is a 400 naming it."""
    kind = part.get("type") if isinstance(part, dict) else None
    if kind == "text":
        return TextPart(str(part.get("text", "")))
    if kind != "image_url":
        raise APIError(
            400,
            f"Content parts of type {kind!r} are not supported; send text or image_url parts.",
            param=where,
        )
    image_url = part.get("image_url")
    url = image_url.get("url") if isinstance(image_url, dict) else image_url
    if not isinstance(url, str) or not url:
        raise APIError(
            400,
            'An image_url part needs {"image_url": {"url": "data:image/png;base64,..." or "https://..."}}.',
            param=f"{where}.image_url",
        )
    detail = image_url.get("detail") if isinstance(image_url, dict) else None
    return ImagePart(url=url, detail=detail if isinstance(detail, str) else None)


def chat_tools(tools: list[dict[str, Any]] | None) -> tuple[Tool, ...] | None:
    """OpenAI tool definitions ({"type": "function", "function": {"name", "description",
    "parameters"}}) as the pipeline's; anything else is a 400 naming the tool."""
    typed = tuple(_tool(tool, index) for index, tool in enumerate(tools or []))
    return typed or None


def _tool(tool: Any, index: int) -> Tool:
    function = (
        tool.get("function")
        if isinstance(tool, dict) and tool.get("type", "function") == "function"
        else None
    )
    name = function.get("name") if isinstance(function, dict) else None
    if not isinstance(function, dict) or not isinstance(name, str) or not name:
        raise APIError(
            400,
            f'tools[{index}] must be {{"type": "function", "function": '
            '{"name": ..., "parameters": {...}}}.',
            param=f"tools[{index}]",
        )
    description = function.get("description")
    parameters = function.get("parameters")
    return Tool(
        name=name,
        description=description if isinstance(description, str) else None,
        parameters=parameters if isinstance(parameters, dict) else None,
    )


_MODES: dict[str, ToolMode] = {"auto": "auto", "none": "none", "required": "required"}


def tool_choice(choice: str | dict[str, Any] | None, tools: tuple[Tool, ...] | None) -> ToolChoice:
    """OpenAI's tool_choice: "auto", "none", "required" or {"type": "function", "function":
    {"name": ...}}; a call required without tools, or any other value, is a 400."""
    decoded: ToolChoice | None = None
    if choice is None:
        decoded = ToolChoice()
    elif isinstance(choice, str) and choice in _MODES:
        decoded = ToolChoice(_MODES[choice])
    elif isinstance(choice, dict) and choice.get("type") == "function":
        function = choice.get("function")
        name = function.get("name") if isinstance(function, dict) else None
        decoded = ToolChoice.named(name) if isinstance(name, str) else None
    if decoded is None:
        raise APIError(
            400,
            'tool_choice must be "auto", "none", "required" or '
            '{"type": "function", "function": {"name": ...}}.',
            param="tool_choice",
        )
    if decoded.requires_call and not tools:
        raise APIError(400, "tool_choice requires a call, but no tools were given.", param="tool_choice")
    return decoded


def chat_request(body: ChatCompletionRequest, model: str) -> GenerationRequest:
    """The pipeline's request for a chat completions body, for the local `model`."""
    if body.top_logprobs is not None and not body.logprobs:
        raise APIError(400, "top_logprobs requires logprobs to be true.", param="top_logprobs")
    tools = chat_tools(body.tools)
    choice = tool_choice(body.tool_choice, tools)
    params = GenerationParams(
        max_tokens=body.max_completion_tokens or body.max_tokens,
        stop=body.stop_list,
        sampling=sampling_params(body),
        top_logprobs=(body.top_logprobs or 0) if body.logprobs else None,
        prompt_lookup=body.prompt_lookup,
        prediction=body.prediction.text if body.prediction else None,
        defaultable=left_out(body),
    )
    return GenerationRequest(
        model=model,
        params=params,
        messages=chat_messages(body.messages),
        tools=tools,
        tool_choice=choice,
        parallel_tool_calls=body.parallel_tool_calls is not False,
        output_format=parse_response_format(body.response_format),
        enable_thinking=body.thinking_toggle,
    )
