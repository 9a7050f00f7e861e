"""Ollama's API under /api (/api/chat, /api/generate, /api/embed, /api/embeddings, /api/tags,
/api/show, /api/ps, /api/version) on the same pipeline as /v1.

Guarded, keyed and audited exactly like /v1 (api/request_guard.py, key_middleware.py,
audit_middleware.py); errors in Ollama's `{"error": "..."}` shape (api/error_shapes.py).
A chat without messages or a generate without a prompt only loads the model, or unloads it
with `keep_alive: 0`, as Ollama does.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Coroutine
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response
from fastapi.routing import APIRoute

from mlx_server.api.audit_middleware import audit_details, audit_stats
from mlx_server.api.sse import ndjson_stream
from mlx_server.models.detection import ModelType
from mlx_server.schemas.ollama import (
    OllamaChatRequest,
    OllamaEmbeddingsRequest,
    OllamaEmbedRequest,
    OllamaGenerateRequest,
    OllamaShowRequest,
)
from mlx_server.services.operations import ollama_models
from mlx_server.services.operations.keep_alive import apply_keep_alive, load_or_unload, parse_keep_alive, warm
from mlx_server.services.pipeline import ollama_render
from mlx_server.services.pipeline.completions import generate_completion
from mlx_server.services.pipeline.embeddings import create_embeddings, input_list
from mlx_server.services.pipeline.generation import CompletionStats
from mlx_server.services.pipeline.inference import generate_chat_completion
from mlx_server.services.pipeline.ollama_render import Kind, RequestClock
from mlx_server.services.pipeline.ollama_request import (
    chat_request,
    generate_request,
    ollama_model,
    request_parameters,
)
from mlx_server.services.pipeline.request import GenerationRequest

# The Ollama release whose API this follows (think, tools, format schemas, /api/embed).
OLLAMA_API_VERSION = "0.12.6"


class OllamaRoute(APIRoute):
    """Marks the audit row as Ollama's before anything can fail (a malformed body too)."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def ollama_handler(request: Request) -> Response:
            audit_details(request).protocol = "ollama"
            return await handler(request)

        return ollama_handler


router = APIRouter(tags=["ollama"], route_class=OllamaRoute)


@router.get("/version")
def version() -> dict[str, str]:
    return {"version": OLLAMA_API_VERSION}


@router.get("/tags")
def list_models() -> dict[str, Any]:
    return ollama_models.tags()


@router.get("/ps")
def running_models() -> dict[str, Any]:
    return ollama_models.running()


@router.post("/show")
def show_model(body: OllamaShowRequest, request: Request) -> dict[str, Any]:
    model = audit_details(request).model = ollama_model(body.model)
    return ollama_models.show(model)


@router.post("/chat", response_model=None)
async def chat(body: OllamaChatRequest, request: Request) -> Response:
    return await _reply("chat", body, request, chat_request, empty=not body.messages)


@router.post("/generate", response_model=None)
async def generate(body: OllamaGenerateRequest, request: Request) -> Response:
    return await _reply("generate", body, request, generate_request, empty=not (body.prompt or body.images))


async def _reply(
    kind: Kind,
    body: Any,
    request: Request,
    translate: Callable[[Any, str], GenerationRequest],
    *,
    empty: bool,
) -> Response:
    """Generate (whole or NDJSON-streamed), then apply the request's keep_alive."""
    details = audit_details(request)
    model = details.model = ollama_model(body.model)
    keep_alive = parse_keep_alive(body.keep_alive)
    details.stream, details.parameters = body.stream, request_parameters(body)
    if empty:
        return JSONResponse(ollama_render.loaded(kind, model, await load_or_unload(model, keep_alive)))
    generation, clock, stats = (
        translate(body, model),
        RequestClock(started=details.started),
        CompletionStats(),
    )
    run = generate_completion if generation.prompt is not None else generate_chat_completion
    events = await run(generation, stats)
    clock.mark_ready()
    if not body.stream:
        whole = await events.collect()
        audit_stats(details, stats)
        await apply_keep_alive(model, keep_alive)
        return JSONResponse(ollama_render.reply(kind, model, whole, clock, stats))

    async def then_keep_alive() -> AsyncIterator[dict[str, Any]]:
        async for chunk in ollama_render.chunks(kind, events, model, clock, stats):
            yield chunk
        await apply_keep_alive(model, keep_alive)

    def failed(message: str) -> None:
        details.error = message

    return ndjson_stream(then_keep_alive(), on_progress=lambda: audit_stats(details, stats), on_error=failed)


@router.post("/embed")
async def embed(body: OllamaEmbedRequest, request: Request) -> dict[str, Any]:
    details = audit_details(request)
    model = details.model = ollama_model(body.model)
    keep_alive = parse_keep_alive(body.keep_alive)
    items = input_list(body.input)
    details.parameters = body.model_dump(include={"truncate", "dimensions"}, exclude_none=True)
    details.parameters["input_count"] = len(items)
    clock = RequestClock(started=details.started)
    await warm(model, ModelType.EMBEDDINGS)
    clock.mark_ready()
    result = await create_embeddings(model, items, dimensions=body.dimensions, truncate=body.truncate)
    details.prompt_tokens = result.prompt_tokens
    await apply_keep_alive(model, keep_alive)
    return ollama_render.embeddings(model, result.vectors.tolist(), result.prompt_tokens, clock)


@router.post("/embeddings")
async def embeddings(body: OllamaEmbeddingsRequest, request: Request) -> dict[str, Any]:
    """The older endpoint: one prompt, `{"embedding": [...]}`."""
    details = audit_details(request)
    model = details.model = ollama_model(body.model)
    keep_alive = parse_keep_alive(body.keep_alive)
    result = await create_embeddings(model, [body.prompt], truncate=True)
    details.prompt_tokens = result.prompt_tokens
    await apply_keep_alive(model, keep_alive)
    return {"embedding": result.vectors[0].tolist()}
