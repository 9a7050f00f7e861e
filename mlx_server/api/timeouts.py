"""Per-endpoint time limits (blueprint §13.2): a /v1 request that runs too long is ended cleanly.

The handler's task is cancelled at the deadline. Cancelling closes the request's generation
(`MetalThread.stream` closes its generator in the next MLX job, the EventStream gives back the
model lease and the admission slot), so the MLX thread is free for the next request. The
client then gets a 504 in its protocol's shape or, when a stream had already started, a last
error event in that stream's framing (OpenAI `data: {"error": ...}`, Anthropic `event: error`,
Ollama a last `{"error": ...}` line).
"""

from __future__ import annotations

import asyncio
import json
from fnmatch import fnmatchcase

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from mlx_server.api.error_shapes import is_anthropic, is_ollama, protocol_error

NOT_TIMED = frozenset({"/v1/health", "/health"})


def timeout_for(endpoint: str, default: float, per_endpoint: dict[str, float]) -> float:
    """Seconds allowed for `endpoint` ("POST /v1/chat/completions"): the first matching glob in
    `per_endpoint`, else the default; 0 means no limit."""
    for pattern, seconds in per_endpoint.items():
        if fnmatchcase(endpoint, pattern):
            return seconds
    return default


def timeout_message(seconds: float) -> str:
    return (
        f"The request took longer than {seconds:g} s, this endpoint's limit, and was stopped. "
        "Ask for fewer tokens, or raise MLX_SERVER_TIMEOUT_SECONDS / MLX_SERVER_ENDPOINT_TIMEOUTS."
    )


def stream_error_event(scope: Scope, message: str) -> bytes:
    """The last event of a stream cut off by its deadline, framed as the protocol frames errors."""
    if is_anthropic(scope):
        body = {"type": "error", "error": {"type": "timeout_error", "message": message}}
        return f"event: error\ndata: {json.dumps(body)}\n\n".encode()
    if is_ollama(scope):  # NDJSON: one last line
        return f"{json.dumps({'error': message})}\n".encode()
    error = {"message": message, "type": "timeout_error", "param": None, "code": "timeout"}
    return f"data: {json.dumps({'error': error})}\n\n".encode()


class RequestTimeout:
    """Pure ASGI; `default` and `per_endpoint` as in `timeout_for`."""

    def __init__(self, app: ASGIApp, default: float, per_endpoint: dict[str, float]) -> None:
        self.app, self.default, self.per_endpoint = app, default, per_endpoint

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "")
        seconds = (
            timeout_for(f"{scope['method']} {path}", self.default, self.per_endpoint)
            if scope["type"] == "http" and path not in NOT_TIMED
            else 0
        )
        if seconds <= 0:
            await self.app(scope, receive, send)
            return
        started = ended = False

        async def watched_send(message: Message) -> None:
            nonlocal started, ended
            started = started or message["type"] == "http.response.start"
            ended = message["type"] == "http.response.body" and not message.get("more_body", False)
            await send(message)

        try:
            async with asyncio.timeout(seconds):
                await self.app(scope, receive, watched_send)
        except TimeoutError:
            if not started:
                await protocol_error(scope, 504, timeout_message(seconds), "timeout")(scope, receive, send)
            elif not ended:
                body = stream_error_event(scope, timeout_message(seconds))
                await send({"type": "http.response.body", "body": body, "more_body": False})
