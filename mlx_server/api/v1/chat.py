"""POST /v1/chat/completions: validate, dispatch to the inference pipeline, format."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import Response

from mlx_server.api.openai_common import audit_start, finished, reject_n, streamed
from mlx_server.schemas.openai import ChatCompletionRequest
from mlx_server.services.pipeline.engine.params import CompletionStats
from mlx_server.services.pipeline.inference import generate_chat_completion
from mlx_server.services.pipeline.protocols import openai_render
from mlx_server.services.pipeline.protocols.openai_request import chat_request

router = APIRouter(tags=["chat"])


@router.post("/chat/completions", response_model=None)
async def create_chat_completion(body: ChatCompletionRequest, request: Request) -> Response:
    model, details = audit_start(request, body)
    reject_n(body)
    stats = CompletionStats()
    events = await generate_chat_completion(chat_request(body, model), stats)
    if body.stream:
        return streamed(
            openai_render.chat_chunks(events, model, include_usage=body.include_usage), details, stats
        )
    reply = await events.collect()
    return finished(openai_render.chat_completion(model, reply, logprobs=body.logprobs), details, stats)
