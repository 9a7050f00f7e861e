"""An OpenAI chat completions request -> GenerationRequest: its sampling fields, tool_choice
decoded into the pipeline's ToolChoice, response_format as a grammar, the thinking toggle."""

from __future__ import annotations

from dataclasses import fields
from typing import Any

from mlx_server.errors import APIError
from mlx_server.schemas.openai import ChatCompletionRequest, SamplingFields
from mlx_server.services.pipeline.engine.params import GenerationParams, SamplingParams
from mlx_server.services.pipeline.model_defaults import DEFAULTABLE_SAMPLING
from mlx_server.services.pipeline.request import GenerationRequest, ToolChoice, ToolMode
from mlx_server.services.pipeline.structured_output import parse_response_format


def sampling_params(body: SamplingFields) -> SamplingParams:
    """The request's sampling fields, which carry SamplingParams' names."""
    return SamplingParams(**{f.name: getattr(body, f.name) for f in fields(SamplingParams)})


def left_out(body: SamplingFields) -> frozenset[str]:
    """The sampling fields the client did not send: the model's defaults fill them."""
    return DEFAULTABLE_SAMPLING - body.model_fields_set


_MODES: dict[str, ToolMode] = {"auto": "auto", "none": "none", "required": "required"}


def tool_choice(choice: str | dict[str, Any] | None, tools: list[dict[str, Any]] | None) -> ToolChoice:
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
    choice = tool_choice(body.tool_choice, body.tools)
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
        messages=[m.model_dump(exclude_none=True) for m in body.messages],
        tools=body.tools,
        tool_choice=choice,
        parallel_tool_calls=body.parallel_tool_calls is not False,
        output_format=parse_response_format(body.response_format),
        enable_thinking=body.thinking_toggle,
    )
