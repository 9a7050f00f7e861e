"""Routing a chat request (blueprint §15 "cloud routing"): the one place that decides where a
request goes, called first by `generate_chat_completion`.

The targets of the first matching rule (or the backend a `backend/model` id names) are tried
in order; the first healthy one serves. A remote target is skipped while its circuit is open;
a failure before its first token (unreachable, timed out, a 5xx) counts against its breaker
and the next target is tried; after the first token a failure ends the stream with an error
(the renderers send it as their protocol's error event). When no target can serve: 503 with
Retry-After, naming what was tried.
"""

from __future__ import annotations

import asyncio
import logging
import math
import weakref
from collections.abc import AsyncGenerator, Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass

import httpx

from mlx_server.config import get_settings
from mlx_server.database import background_session
from mlx_server.errors import APIError
from mlx_server.records import BackendKind, RemoteBackend
from mlx_server.services.pipeline.engine.params import CompletionStats
from mlx_server.services.pipeline.events import GenerationEvent
from mlx_server.services.pipeline.request import GenerationRequest
from mlx_server.services.remote.anthropic_upstream import anthropic_events, messages_body
from mlx_server.services.remote.backends import (
    Target,
    auth_headers,
    check_address,
    list_backends,
    route_targets,
    timeouts,
)
from mlx_server.services.remote.breaker import CircuitBreaker, breaker
from mlx_server.services.remote.openai_upstream import chat_body, openai_events
from mlx_server.services.remote.progress import UpstreamError, UpstreamProgress

logger = logging.getLogger("mlx_server.remote")

Events = AsyncGenerator[GenerationEvent, None]


@dataclass(frozen=True)
class RemoteReply:
    """A remote target serves the request: its events, and their release."""

    events: Events
    release: Callable[[], None]


@dataclass(frozen=True)
class LocalTarget:
    """A local model serves the request (the rule's target, which may be another model)."""

    model: str


async def route_chat(request: GenerationRequest, stats: CompletionStats) -> RemoteReply | LocalTarget | None:
    """Where `request` goes: the first remote target that serves it (its events opened), or the
    first local target reached; None when no rule or backend applies (the request's own model
    serves it as it always has). The caller generates locally; routing never calls back."""
    with background_session() as session:
        targets = route_targets(session, request.model)
        backends = {b.name: b for b in list_backends(session)} if targets else {}
    if targets is None:
        return None
    tried: list[str] = []
    for target in targets:
        if target.backend is None:
            return LocalTarget(target.model)
        opened = await _try_backend(backends.get(target.backend), target, request, stats, tried)
        if opened is not None:
            return RemoteReply(*opened)
    raise _all_down(request.model, tried, [backends[t.backend] for t in targets if t.backend in backends])


async def _try_backend(
    backend: RemoteBackend | None,
    target: Target,
    request: GenerationRequest,
    stats: CompletionStats,
    tried: list[str],
) -> tuple[Events, Callable[[], None]] | None:
    name = str(target.backend)
    if backend is None:
        tried.append(f"{name} (no such backend)")
        return None
    circuit = breaker(name)
    if not circuit.try_acquire():
        tried.append(f"{name} (circuit open for {math.ceil(circuit.retry_after())} s more)")
        return None
    try:
        opened = await _open(backend, target.model, request, stats, circuit)
    except UpstreamError as exc:
        circuit.failed(str(exc))
        logger.warning("%s; trying the next target", exc)
        tried.append(f"{name} ({exc})")
        return None
    stats.backend = name
    return opened


def _all_down(model: str, tried: list[str], backends: list[RemoteBackend]) -> APIError:
    waits = [breaker(b.name).retry_after() for b in backends]
    retry = max(
        1, math.ceil(min((w for w in waits if w > 0), default=get_settings().remote_breaker_cooldown_seconds))
    )
    return APIError(
        503,
        f"No target of {model!r} could serve the request; tried: {'; '.join(tried)}. Retry after {retry} s.",
        code="backends_unavailable",
        headers={"Retry-After": str(retry)},
    )


def _request_of(
    backend: RemoteBackend, model: str, request: GenerationRequest
) -> tuple[str, dict[str, object]]:
    if backend.kind == BackendKind.ANTHROPIC:
        return backend.base_url + "/v1/messages", messages_body(request, model)
    return backend.base_url + "/chat/completions", chat_body(request, model)


async def _open(
    backend: RemoteBackend,
    model: str,
    request: GenerationRequest,
    stats: CompletionStats,
    circuit: CircuitBreaker,
) -> tuple[Events, Callable[[], None]]:
    """Send the request and wait for its first event; any failure so far is an UpstreamError
    (or the upstream's own 4xx, passed on as an APIError)."""
    progress = UpstreamProgress(backend.name, stats)
    try:
        await check_address(backend.base_url)  # what its name resolves to now
    except APIError as refused:
        raise progress.upstream_error(refused.message) from None
    exits = AsyncExitStack()
    url, body = _request_of(backend, model, request)
    try:
        client = _client()
        upstream = client.build_request(
            "POST", url, json=body, headers=auth_headers(backend), timeout=timeouts(backend)
        )
        response = await client.send(upstream, stream=True)
        exits.push_async_callback(response.aclose)
        await _check_status(backend, response)
        parse = anthropic_events if backend.kind == BackendKind.ANTHROPIC else openai_events
        events = parse(response, progress)
        exits.push_async_callback(events.aclose)
        first = await anext(events)
    except BaseException as exc:
        await exits.aclose()
        if isinstance(exc, (httpx.HTTPError, ValueError, StopAsyncIteration)):
            raise progress.upstream_error(f"{type(exc).__name__}: {exc}") from exc
        if isinstance(exc, APIError):
            circuit.succeeded()  # it answered, and said no
        elif not isinstance(exc, UpstreamError):  # counted by the caller
            circuit.abandoned()  # cancelled (client gone, time limit): no verdict on the backend
        raise
    circuit.succeeded()  # a first token: the backend is healthy
    return _passthrough(first, events, progress, circuit, exits), _closer(exits)


async def _check_status(backend: RemoteBackend, response: httpx.Response) -> None:
    if response.status_code < 400:
        return
    text = (await response.aread()).decode(errors="replace")[:500]
    if response.status_code >= 500 or response.status_code in (408, 429):
        raise UpstreamError(f"backend {backend.name!r}: HTTP {response.status_code}: {text}")
    # The request itself was refused: another target would refuse it too.
    raise APIError(response.status_code, f"Backend {backend.name!r} refused the request: {text}")


async def _passthrough(
    first: GenerationEvent,
    events: Events,
    progress: UpstreamProgress,
    circuit: CircuitBreaker,
    exits: AsyncExitStack,
) -> Events:
    """The upstream's events as they arrive; a failure now ends the stream with an error."""
    try:
        yield first
        async for event in events:
            yield event
    except (httpx.HTTPError, UpstreamError, ValueError) as exc:
        circuit.failed(f"{type(exc).__name__}: {exc}")
        raise APIError(
            502,
            f"Backend {progress.backend!r} failed after the reply had started "
            f"({progress.stats.completion_tokens} tokens in): {type(exc).__name__}: {exc}",
        ) from exc
    finally:
        await exits.aclose()


_closing: set[asyncio.Task[None]] = set()
# One client per event loop: its connection pool keeps upstream connections alive between
# requests, and its TLS context is built once (tens of ms each time otherwise).
_clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, httpx.AsyncClient] = (
    weakref.WeakKeyDictionary()
)


def _client() -> httpx.AsyncClient:
    loop = asyncio.get_running_loop()
    client = _clients.get(loop)
    if client is None:
        client = _clients[loop] = httpx.AsyncClient()
    return client


def _closer(exits: AsyncExitStack) -> Callable[[], None]:
    """The stream's release: closes the upstream connection if the stream did not (a client
    gone before it started iterating); a no-op after the stream closed it."""

    def release() -> None:
        try:
            task = asyncio.get_running_loop().create_task(exits.aclose())
        except RuntimeError:  # no loop left: the process is ending
            return
        _closing.add(task)
        task.add_done_callback(_closing.discard)

    return release
