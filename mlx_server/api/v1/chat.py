"""POST /v1/chat/completions: validate, dispatch to the inference pipeline, format."""

from __future__ import annotations

from collections.abc import AsyncIterable
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from mlx_server.api.audit_middleware import AuditDetails, audit_details, audit_parameters
from mlx_server.api.sse import openai_event_stream
from mlx_server.errors import APIError
from mlx_server.schemas.openai import ChatCompletionRequest, SamplingFields
from mlx_server.services.pipeline import openai_render
from mlx_server.services.pipeline.catalog import resolve_model
from mlx_server.services.pipeline.generation import CompletionStats, GenerationParams
from mlx_server.services.pipeline.inference import generate_chat_completion
from mlx_server.services.pipeline.request import GenerationRequest
from mlx_server.services.pipeline.sampling import SamplingParams
from mlx_server.services.pipeline.structured_output import parse_response_format

router = APIRouter(tags=["chat"])


def sampling_params(body: SamplingFields) -> SamplingParams:
    return SamplingParams(
        temperature=body.temperature,
        top_p=body.top_p,
        top_k=body.top_k,
        min_p=body.min_p,
        repetition_penalty=body.repetition_penalty,
        presence_penalty=body.presence_penalty,
        frequency_penalty=body.frequency_penalty,
        logit_bias=body.logit_bias,
        seed=body.seed,
    )


def audit_start(request: Request, body: SamplingFields) -> tuple[str, AuditDetails]:
    """The local model the request names (aliases resolved), and its audit row's details."""
    model = resolve_model(body.model)
    details = audit_details(request)
    details.model, details.protocol, details.stream = model, "openai", body.stream
    details.parameters = audit_parameters(body)
    return model, details


def audit_stats(details: AuditDetails, stats: CompletionStats) -> None:
    """Copy the generation's figures into the request's audit row (safe to call repeatedly)."""
    details.prompt_tokens = stats.prompt_tokens or None
    details.completion_tokens = stats.completion_tokens
    if stats.first_token_at is not None and details.ttft_ms is None:
        details.ttft_ms = (stats.first_token_at - details.started) * 1000


def finished(body: dict[str, Any], details: AuditDetails, stats: CompletionStats) -> Response:
    audit_stats(details, stats)
    return JSONResponse(body)


def streamed(
    chunks: AsyncIterable[dict[str, Any]], details: AuditDetails, stats: CompletionStats
) -> Response:
    """OpenAI-style server-sent events, the audit row following the stream as it goes."""

    def failed(message: str) -> None:
        details.error = message

    return openai_event_stream(chunks, on_progress=lambda: audit_stats(details, stats), on_error=failed)


def reject_n(body: SamplingFields) -> None:
    if body.n != 1:
        raise APIError(400, "Only n=1 is supported; send separate requests for more choices.", param="n")


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
