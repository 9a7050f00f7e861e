"""POST /v1/chat/completions: validate, dispatch to the inference pipeline, format."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import Response

from mlx_server.api.openai_common import (
    audit_start,
    finished,
    left_out,
    reject_n,
    sampling_params,
    streamed,
)
from mlx_server.errors import APIError
from mlx_server.schemas.openai import ChatCompletionRequest
from mlx_server.services.pipeline.engine.generation import CompletionStats, GenerationParams
from mlx_server.services.pipeline.inference import generate_chat_completion
from mlx_server.services.pipeline.protocols import openai_render
from mlx_server.services.pipeline.request import GenerationRequest
from mlx_server.services.pipeline.structured_output import parse_response_format

router = APIRouter(tags=["chat"])


def _check(body: ChatCompletionRequest) -> None:
    reject_n(body)
    if body.top_logprobs is not None and not body.logprobs:
        raise APIError(400, "top_logprobs requires logprobs to be true.", param="top_logprobs")
    choice = body.tool_choice
    named = (
        isinstance(choice, dict)
        and choice.get("type") == "function"
        and "name" in (choice.get("function") or {})
    )
    if choice is not None and choice not in ("auto", "none", "required") and not named:
        raise APIError(
            400,
            'tool_choice must be "auto", "none", "required" or '
            '{"type": "function", "function": {"name": ...}}.',
            param="tool_choice",
        )
    if (choice == "required" or named) and not body.tools:
        raise APIError(400, "tool_choice requires a call, but no tools were given.", param="tool_choice")


def _request(body: ChatCompletionRequest, model: str) -> GenerationRequest:
    params = GenerationParams(
        max_tokens=body.max_completion_tokens or body.max_tokens,
        stop=body.stop_list,
        sampling=sampling_params(body),
        top_logprobs=(body.top_logprobs or 0) if body.logprobs else None,
        defaultable=left_out(body),
    )
    return GenerationRequest(
        model=model,
        params=params,
        messages=[m.model_dump(exclude_none=True) for m in body.messages],
        tools=body.tools,
        tool_choice=body.tool_choice,
        parallel_tool_calls=body.parallel_tool_calls is not False,
        output_format=parse_response_format(body.response_format),
        enable_thinking=body.thinking_toggle,
    )


@router.post("/chat/completions", response_model=None)
async def create_chat_completion(body: ChatCompletionRequest, request: Request) -> Response:
    model, details = audit_start(request, body)
    _check(body)
    stats = CompletionStats()
    events = await generate_chat_completion(_request(body, model), stats)
    if body.stream:
        return streamed(
            openai_render.chat_chunks(events, model, include_usage=body.include_usage), details, stats
        )
    reply = await events.collect()
    return finished(openai_render.chat_completion(model, reply, logprobs=body.logprobs), details, stats)
