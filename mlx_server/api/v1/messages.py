"""POST /v1/messages and /v1/messages/count_tokens: Anthropic's Messages API on the same pipeline.

The key (`x-api-key` or `Authorization: Bearer`) and `anthropic-version` are accepted and not
checked: the server is local. Every version gets the same, most lenient, behaviour: sampling
parameters (temperature, top_p, top_k), which API version 2026-10-21 rejects, are honoured,
because against a local model they are often what the user wants.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any

from fastapi import APIRouter, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from fastapi.routing import APIRoute

from mlx_server.api.audit_middleware import audit_details, audit_parameters, audit_stats
from mlx_server.api.sse import anthropic_event_stream
from mlx_server.errors import APIError, anthropic_error_response, validation_error
from mlx_server.schemas.anthropic import MessagesInput, MessagesRequest, TokenCount
from mlx_server.services.pipeline.catalog import resolve_model
from mlx_server.services.pipeline.engine.params import CompletionStats
from mlx_server.services.pipeline.inference import count_chat_tokens, generate_chat_completion
from mlx_server.services.pipeline.protocols import anthropic_render
from mlx_server.services.pipeline.protocols.anthropic_request import ProtocolTranslator

translator = ProtocolTranslator()


class AnthropicRoute(APIRoute):
    """Errors of these routes, validation included, in Anthropic's shape (the SDKs read it),
    and the audit row marked as Anthropic before anything can fail."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def anthropic_handler(request: Request) -> Response:
            details = audit_details(request)
            details.protocol = "anthropic"
            try:
                return await handler(request)
            except RequestValidationError as exc:
                error = validation_error(list(exc.errors()))
            except APIError as exc:
                error = exc
            details.error = error.message
            return anthropic_error_response(error, details.request_id or None)

        return anthropic_handler


router = APIRouter(tags=["anthropic"], route_class=AnthropicRoute)


@router.post("/messages", response_model=None)
async def create_message(body: MessagesRequest, request: Request) -> Response:
    details = audit_details(request)
    model = resolve_model(body.model)
    details.model, details.stream = model, body.stream
    details.parameters = audit_parameters(body)
    stats = CompletionStats()
    events = await generate_chat_completion(translator.anthropic_to_internal(body, model), stats)
    if not body.stream:
        reply = await events.collect()
        audit_stats(details, stats)
        return JSONResponse(anthropic_render.message(model, reply))

    def failed(message: str) -> None:
        details.error = message

    rendered = anthropic_render.events(events, model, stats.prompt_tokens)
    return anthropic_event_stream(rendered, on_progress=lambda: audit_stats(details, stats), on_error=failed)


@router.post("/messages/count_tokens")
async def count_tokens(body: MessagesInput, request: Request) -> TokenCount:
    model = resolve_model(body.model)
    audit_details(request).model = model
    tokens = await count_chat_tokens(translator.anthropic_to_internal(body, model))
    return TokenCount(input_tokens=tokens)
