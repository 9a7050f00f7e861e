"""Ollama's API under /api (/api/chat, /api/generate, /api/embed, /api/embeddings, /api/tags,
/api/show, /api/ps, /api/version) on the same pipeline as /v1, and its model management
(/api/pull from the hub through the dashboard's downloads, /api/delete, /api/copy; /api/push
refused with why).

Guarded, keyed and audited exactly like /v1 (api/request_guard.py, key_middleware.py,
audit_middleware.py); errors in Ollama's `{"error": "..."}` shape (api/error_shapes.py).
A chat without messages or a generate without a prompt only loads the model, or unloads it
with `keep_alive: 0`, as Ollama does.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Coroutine
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response
from fastapi.routing import APIRoute

from mlx_server.api.audit_middleware import audit_details, audit_stats
from mlx_server.api.sse import ndjson_stream
from mlx_server.database import SessionDep
from mlx_server.errors import APIError
from mlx_server.models.detection import ModelType
from mlx_server.models.pool import get_model_pool
from mlx_server.models.store import ModelStoreError, get_model
from mlx_server.schemas.ollama import (
    OllamaChatRequest,
    OllamaCopyRequest,
    OllamaCreateRequest,
    OllamaDeleteRequest,
    OllamaEmbeddingsRequest,
    OllamaEmbedRequest,
    OllamaGenerateRequest,
    OllamaPullRequest,
    OllamaPushRequest,
    OllamaShowRequest,
)
from mlx_server.services.operations import ollama_models
from mlx_server.services.operations.keep_alive import apply_keep_alive, load_or_unload, parse_keep_alive, warm
from mlx_server.services.operations.model_files import copy_model, delete_model
from mlx_server.services.operations.model_presets import create_preset, refuse_unsupported
from mlx_server.services.operations.model_pulls import PullProgress, hub_repo_id, model_puller
from mlx_server.services.pipeline.completions import generate_completion
from mlx_server.services.pipeline.embeddings import create_embeddings, input_list
from mlx_server.services.pipeline.engine.params import CompletionStats
from mlx_server.services.pipeline.inference import generate_chat_completion
from mlx_server.services.pipeline.protocols import ollama_render
from mlx_server.services.pipeline.protocols.ollama_render import Kind, RequestClock
from mlx_server.services.pipeline.protocols.ollama_request import (
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
def list_models(session: SessionDep) -> dict[str, Any]:
    return ollama_models.tags(session)


@router.get("/ps")
def running_models(session: SessionDep) -> dict[str, Any]:
    return ollama_models.running(session)


@router.post("/show")
def show_model(session: SessionDep, body: OllamaShowRequest, request: Request) -> dict[str, Any]:
    model = audit_details(request).model = ollama_model(body.model)
    return ollama_models.show(session, model)


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


@router.post("/pull", response_model=None)
async def pull(body: OllamaPullRequest, request: Request) -> Response:
    """Download a hub repo through the dashboard's download manager, with Ollama's progress
    objects. The download is a job of its own: a client that leaves does not stop it."""
    details = audit_details(request)
    repo_id = details.model = hub_repo_id(body.model)
    details.stream = body.stream
    updates = model_puller()(repo_id)
    first = await anext(updates)
    if first.error is not None:  # refused before it started: a proper status
        await updates.aclose()
        raise APIError(first.error_status, first.error, param="model")
    if not body.stream:
        last = first
        async for update in updates:
            last = update
        if last.status != "completed":
            raise APIError(500, str(ollama_render.pull_lines(last, repo_id)[0].get("error", "failed")))
        return JSONResponse({"status": "success"})

    async def lines() -> AsyncIterator[dict[str, Any]]:
        yield {"status": "pulling manifest"}
        progress: PullProgress | None = first
        while progress is not None:
            for line in ollama_render.pull_lines(progress, repo_id):
                yield line
            progress = await anext(updates, None)

    def failed(message: str) -> None:
        details.error = message

    return ndjson_stream(lines(), on_error=failed)


@router.delete("/delete")
async def delete(session: SessionDep, body: OllamaDeleteRequest, request: Request) -> Response:
    """Unregister a model and remove the files that are ours (a copy's files stay for the other
    name). A loaded model is unloaded first, unless it is pinned or serving a request."""
    model = audit_details(request).model = ollama_model(body.model)
    pool = get_model_pool()
    loaded = pool.get_loaded(model)
    if loaded is not None and (loaded.pinned or loaded.active):
        why = "pinned in the dashboard; unpin it" if loaded.pinned else "serving a request; wait"
        raise APIError(409, f"{model} is {why} before deleting it.", param="model")
    if loaded is not None:
        await pool.unload(model)
    try:
        await asyncio.to_thread(delete_model, session, model)
    except ModelStoreError as exc:
        raise APIError(409, str(exc), param="model") from exc
    return Response(status_code=200)


@router.post("/copy")
def copy(session: SessionDep, body: OllamaCopyRequest, request: Request) -> Response:
    """A second name for the same files (nothing is copied); an existing name is refused."""
    source = audit_details(request).model = ollama_model(body.source)
    destination = body.destination.removesuffix(":latest")
    if get_model(session, destination) is not None:
        raise APIError(409, f"A model named {destination!r} exists; delete it first.", param="destination")
    try:
        copy_model(session, source, destination)
    except ModelStoreError as exc:
        raise APIError(400, str(exc), param="destination") from exc
    return Response(status_code=200)


@router.post("/create", response_model=None)
async def create(session: SessionDep, body: OllamaCreateRequest, request: Request) -> Response:
    """A named preset of a model (a Modelfile's FROM, SYSTEM and PARAMETER lines): a second name
    for its files with its own defaults (services/operations/model_presets.py)."""
    details = audit_details(request)
    details.model, details.stream = body.model, body.stream
    if body.modelfile:
        raise APIError(
            400,
            "The `modelfile` text is not read: send its lines as fields, as Ollama's API does since "
            "0.5 (`from`, `system`, `parameters`).",
            param="modelfile",
        )
    refuse_unsupported(body.model_dump(include={"files", "adapters", "messages", "quantize"}))
    if body.from_ is None:
        raise APIError(
            400, "`from` must name the model to base the new one on (GET /api/tags).", param="from"
        )
    source = ollama_model(body.from_)
    name = body.model.removesuffix(":latest")
    preset = await asyncio.to_thread(
        create_preset,
        session,
        name,
        source,
        system=body.system,
        parameters=body.parameters,
        template=body.template,
    )
    if not body.stream:
        return JSONResponse({"status": "success"})

    async def lines() -> AsyncIterator[dict[str, Any]]:
        yield {"status": f"using existing layer sha256:{ollama_models.digest(preset)}"}
        for status in ("creating parameters layer", "writing manifest", "success"):
            yield {"status": status}

    return ndjson_stream(lines())


@router.post("/push")
def push(body: OllamaPushRequest, request: Request) -> Response:
    audit_details(request).model = body.model
    raise APIError(
        400,  # not 501: a 5xx says the server failed (tests/test_fuzz.py); this is the request
        "Pushing is not supported: this server runs models from Hugging Face repos and local files "
        "and has no registry to push to. Upload a model directory with "
        "`huggingface-cli upload <org/name> <directory>` instead.",
        param="model",
        code="push_unsupported",
    )
