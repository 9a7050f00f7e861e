"""Streamed responses: server-sent events for OpenAI and Anthropic, NDJSON for Ollama.

OpenAI: `data: {json}` per chunk, then `data: [DONE]`. Anthropic: named events
(`event: message_start` ...), `ping` events while the client waits, no terminator.
Ollama: one JSON object per line, no terminator.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterable, AsyncIterator, Callable, Mapping
from typing import Any, TypeVar

from sse_starlette import EventSourceResponse, ServerSentEvent
from starlette.responses import StreamingResponse

from mlx_server.errors import APIError

logger = logging.getLogger("mlx_server.api")

# Seconds between keep-alives while nothing else is sent (a long prefill on a big prompt).
PING_SECONDS = 15
ANTHROPIC_PING_SECONDS = 5
NDJSON_MEDIA_TYPE = "application/x-ndjson"

T = TypeVar("T")


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


async def _guarded(
    events: AsyncIterable[T],
    error_event: Callable[[str], T],
    on_progress: Callable[[], None] | None,
    on_error: Callable[[str], None] | None,
) -> AsyncIterator[T]:
    """`events`, with a failure after the first one turned into an error event (the status line
    is gone); `on_progress` runs after every event and once at the end, also when the client left."""
    try:
        async for event in events:
            if on_progress is not None:
                on_progress()
            yield event
    except Exception as exc:
        logger.exception("stream failed")
        message = exc.message if isinstance(exc, APIError) else f"Generation failed: {exc}"
        if on_error is not None:
            on_error(message)
        yield error_event(message)
    finally:
        if on_progress is not None:
            on_progress()


def openai_event_stream(
    chunks: AsyncIterable[Mapping[str, Any]],
    *,
    on_progress: Callable[[], None] | None = None,
    on_error: Callable[[str], None] | None = None,
) -> EventSourceResponse:
    """Stream `chunks`; a failure becomes an `error` payload, as OpenAI sends it."""

    async def data() -> AsyncIterator[ServerSentEvent]:
        async for chunk in chunks:
            yield ServerSentEvent(data=_json(chunk))

    def error(message: str) -> ServerSentEvent:
        return ServerSentEvent(
            data=_json({"error": {"message": message, "type": "server_error", "param": None, "code": None}})
        )

    async def events() -> AsyncIterator[ServerSentEvent]:
        async for event in _guarded(data(), error, on_progress, on_error):
            yield event
        yield ServerSentEvent(data="[DONE]")

    # sep="\n": the "\n\n" framing OpenAI uses; some hand-written clients split on exactly that.
    return EventSourceResponse(events(), sep="\n", ping=PING_SECONDS, headers={"Cache-Control": "no-cache"})


def anthropic_event_stream(
    events: AsyncIterable[tuple[str, dict[str, Any]]],
    *,
    on_progress: Callable[[], None] | None = None,
    on_error: Callable[[str], None] | None = None,
) -> EventSourceResponse:
    """Stream named Anthropic events; a failure becomes an `error` event, as Anthropic sends it."""

    async def named() -> AsyncIterator[ServerSentEvent]:
        async for name, payload in events:
            yield ServerSentEvent(event=name, data=_json(payload))

    def error(message: str) -> ServerSentEvent:
        body = {"type": "error", "error": {"type": "api_error", "message": message}}
        return ServerSentEvent(event="error", data=_json(body))

    def ping() -> ServerSentEvent:
        return ServerSentEvent(event="ping", data=_json({"type": "ping"}))

    return EventSourceResponse(
        _guarded(named(), error, on_progress, on_error),
        sep="\n",
        ping=ANTHROPIC_PING_SECONDS,
        ping_message_factory=ping,
        headers={"Cache-Control": "no-cache"},
    )


def ndjson_stream(
    objects: AsyncIterable[dict[str, Any]],
    *,
    on_progress: Callable[[], None] | None = None,
    on_error: Callable[[str], None] | None = None,
) -> StreamingResponse:
    """Ollama's streaming: one JSON object per line; a failure becomes a last `{"error": ...}`
    line, which Ollama's clients raise."""

    async def lines() -> AsyncIterator[str]:
        async for item in objects:
            yield _json(item) + "\n"

    def error(message: str) -> str:
        return _json({"error": message}) + "\n"

    return StreamingResponse(_guarded(lines(), error, on_progress, on_error), media_type=NDJSON_MEDIA_TYPE)
