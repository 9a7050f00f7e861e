"""One Responses API request on the pipeline: the conversation (the previous response's, then
this input), the generation, the rendered response, and its storage when `store` is true.

A streamed response is stored before its final event is sent, so a client that retrieves it
or continues from it as soon as the stream ends finds it.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

from mlx_server.schemas.responses import ResponseRequest
from mlx_server.services.operations.responses_store import conversation_after, save_response
from mlx_server.services.pipeline.engine.params import CompletionStats
from mlx_server.services.pipeline.inference import EventStream, generate_chat_completion
from mlx_server.services.pipeline.protocols.responses_render import (
    Payload,
    ResponseBuilder,
    response_events,
    response_object,
)
from mlx_server.services.pipeline.protocols.responses_request import (
    input_items,
    request_echo,
    responses_to_internal,
)

FINAL_EVENTS = frozenset({"response.completed", "response.incomplete"})


async def create_response(
    body: ResponseRequest, model: str, stats: CompletionStats
) -> Payload | AsyncIterator[Payload]:
    """The response object, or for `stream` the response's events (`model`: the local id the
    request's model resolved to). Every request error is raised here, before any event."""
    previous = body.previous_response_id
    history = await asyncio.to_thread(conversation_after, previous) if previous else []
    items = input_items(body)
    events = await generate_chat_completion(responses_to_internal(body, model, history, items), stats)
    builder = ResponseBuilder(request_echo(body, model))

    def store(final: Payload) -> None:
        if body.store:
            save_response(final, history=history, input_items=items, previous_response_id=previous)

    if body.stream:
        return _stored_stream(events, builder, store)
    final = await response_object(events, builder)
    await asyncio.to_thread(store, final)
    return final


async def _stored_stream(
    events: EventStream, builder: ResponseBuilder, store: Callable[[Payload], Any]
) -> AsyncIterator[Payload]:
    async for payload in response_events(events, builder):
        if payload["type"] in FINAL_EVENTS:
            await asyncio.to_thread(store, payload["response"])
        yield payload
