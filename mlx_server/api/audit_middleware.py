"""Audit every /v1 and /api (Ollama) request: a row written when it arrives, committed before
its response starts, completed when the response ends (last byte sent or client gone).

A pure ASGI middleware, not BaseHTTPMiddleware: it sees a streamed body chunk by chunk, so it
can time the last byte and notice a client leaving mid-stream. Handlers add what only they
know (model, tokens, time to first token) to `audit_details(request)`; the middleware reads
those details when the response starts (what an interrupted row keeps) and when it ends, so a
streaming handler can fill them while it streams. Every value is bounded on its way to the
row (utils/bounded.py): whatever a client sends, a row stays a few kilobytes.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Annotated, Any
from uuid import uuid4

from fastapi import Depends, Request
from pydantic import BaseModel
from starlette.datastructures import Headers, MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from mlx_server.records import AuditLog, AuditState, utcnow
from mlx_server.services.operations.audit import AuditService, audit_service
from mlx_server.services.pipeline.engine.params import CompletionStats
from mlx_server.utils.bounded import bounded, clip

if TYPE_CHECKING:
    from mlx_server.services.operations.metrics import ServerMetrics

logger = logging.getLogger("mlx_server.audit")

AUDIT_STATE_KEY = "audit"
REQUEST_ID_HEADER = "x-request-id"
# Why the model's tool calls were rejected (a non-streamed reply; streams: the audit row and the
# protocol's last event, see docs/ARCHITECTURE.md "Tool calls and reasoning").
REJECTED_CALLS_HEADER = "x-tool-calls-rejected"
# nginx's "client closed request": the client left before the response was complete.
CLIENT_CLOSED_REQUEST = 499
_CLOSED = "The client closed the connection before the response was complete."
AUDITED_PREFIXES = ("/v1", "/api")
NOT_AUDITED = frozenset({"/v1/health"})  # polled by monitors; would drown the log
_MAX_ERROR_BODY = 64 * 1024
_MAX_ERROR_CHARS = 4000
# The longest a response waits for its row to be committed (a locked database delays answers
# by at most this, and loses no request; the row follows when the database frees up).
ACK_WAIT_S = 1.0
_MAX_ENDPOINT_CHARS = 128  # the column's declared length
_MAX_MODEL_CHARS = 255  # the column's declared length (SQLite does not enforce it)
HTTP_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "CONNECT", "TRACE"})
# Request fields recorded as the audit row's parameters when the client set them: how it asked
# to generate, never what it sent to generate from (messages, prompt, tool definitions).
AUDITED_PARAMETERS = frozenset(
    {
        "temperature",
        "top_p",
        "top_k",
        "min_p",
        "repetition_penalty",
        "presence_penalty",
        "frequency_penalty",
        "seed",
        "stop",
        "stop_sequences",
        "n",
        "max_tokens",
        "max_completion_tokens",
        "logprobs",
        "top_logprobs",
        "echo",
        "best_of",
        "tool_choice",
        "parallel_tool_calls",
        "enable_thinking",
        "thinking",
    }
)


@dataclass(slots=True)
class AuditDetails:
    """What only the handler knows about a request; read by the middleware when it ends."""

    request_id: str = ""
    model: str | None = None
    protocol: str | None = None
    stream: bool | None = None
    ttft_ms: float | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    audio_seconds: float | None = None
    error: str | None = None
    parameters: dict[str, Any] | None = None
    # The API key's name (set by api/key_middleware.py when the request was admitted with a key).
    key_name: str | None = None
    # The remote backend that answered (services/remote); None when a local model did.
    backend: str | None = None
    # What the reply did not deliver (a rejected tool call, a required call not made): the row's
    # warnings; `rejected_tool_calls` (why each was rejected) also becomes the
    # x-tool-calls-rejected header of a response not yet started.
    warnings: list[str] | None = None
    rejected_tool_calls: list[str] = field(default_factory=list)
    # perf_counter() at the request's arrival: the origin of latency_ms and ttft_ms.
    started: float = field(default_factory=time.perf_counter, repr=False, compare=False)

    def mark_first_token(self) -> None:
        """Set ttft_ms to now, measured from the request's arrival; later calls keep the first."""
        if self.ttft_ms is None:
            self.ttft_ms = (time.perf_counter() - self.started) * 1000


def audit_details(request: Request) -> AuditDetails:
    """The request's audit details (created if the middleware is absent, so handlers never fail)."""
    state: dict[str, Any] = request.scope.setdefault("state", {})
    details = state.get(AUDIT_STATE_KEY)
    if not isinstance(details, AuditDetails):
        details = state[AUDIT_STATE_KEY] = AuditDetails()
    return details


AuditDetailsDep = Annotated[AuditDetails, Depends(audit_details)]


def audit_parameters(body: BaseModel) -> dict[str, Any]:
    """The generation parameters the client set in `body` (see AUDITED_PARAMETERS), as JSON values."""
    parameters: dict[str, Any] = body.model_dump(
        mode="json", include=set(AUDITED_PARAMETERS), exclude_unset=True
    )
    tools = getattr(body, "tools", None)
    if tools:  # names only: definitions can be long and are part of the prompt
        parameters["tools"] = [_tool_name(tool) for tool in tools]
    return parameters


def audit_stats(details: AuditDetails, stats: CompletionStats) -> None:
    """Copy the generation's figures into the request's audit row (safe to call repeatedly)."""
    details.prompt_tokens = stats.prompt_tokens or None
    details.completion_tokens = stats.completion_tokens
    details.backend = stats.backend
    details.warnings = list(stats.notices) or None
    details.rejected_tool_calls = list(stats.rejected_calls)
    if stats.first_token_at is not None and details.ttft_ms is None:
        details.ttft_ms = (stats.first_token_at - details.started) * 1000


def header_text(text: str, limit: int = 1000) -> str:
    """`text` as a header value: one line, ASCII (other characters escaped), at most `limit`."""
    line = " ".join(text.split()).encode("ascii", "backslashreplace").decode("ascii")
    return line if len(line) <= limit else line[: limit - 3] + "..."


def _tool_name(tool: object) -> str:
    if isinstance(tool, dict):
        function = tool.get("function")
        name = function.get("name") if isinstance(function, dict) else tool.get("name")
        return str(name)
    return str(getattr(tool, "name", "?"))


def full_path(scope: Scope) -> str:
    # Starlette keeps the mount prefix in `path` (root_path "/v1", path "/v1/models"); servers
    # following the older ASGI reading strip it, so add root_path back only when it is missing.
    path: str = scope["path"]
    root_path: str = scope.get("root_path", "")
    return path if path.startswith(root_path) else root_path + path


def route_label(scope: Scope) -> str:
    """The request's method and route ("GET /v1/admin/models/{model_id}/load": its path with the
    path parameters' values replaced by their names), so ids in paths do not each make a metrics
    series; "(unmatched)" when no route took the request (refused before routing, or no such path)."""
    method = scope["method"] if scope["method"] in HTTP_METHODS else "OTHER"  # any token parses
    if "endpoint" not in scope:  # set by the router on a match
        return f"{method} (unmatched)"
    rest, route = full_path(scope), ""
    for name, value in reversed(scope.get("path_params", {}).items()):  # right to left
        head, found, tail = rest.rpartition(str(value))
        if found:
            rest, route = head, "{" + name + "}" + tail + route
    return f"{method} {rest}{route}"


def is_audited(path: str) -> bool:
    audited = any(path == prefix or path.startswith(prefix + "/") for prefix in AUDITED_PREFIXES)
    return audited and path not in NOT_AUDITED


def _error_message(body: bytes) -> str | None:
    """The message of an error body in OpenAI's, Anthropic's or Ollama's (a string) shape."""
    try:
        parsed = json.loads(body)
    except ValueError:
        return None
    error = parsed.get("error") if isinstance(parsed, dict) else None
    message = error.get("message") if isinstance(error, dict) else error
    return message if isinstance(message, str) else None


class AuditMiddleware:
    """Records one audit row per /v1 or /api request and returns its id as the x-request-id header."""

    def __init__(
        self, app: ASGIApp, service: AuditService | None = None, metrics: ServerMetrics | None = None
    ) -> None:
        self.app = app
        self.service = service or audit_service
        self.metrics = metrics  # counts each row as it is recorded (services/operations/metrics.py)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = full_path(scope) if scope["type"] == "http" else ""
        if not is_audited(path):
            await self.app(scope, receive, send)
            return
        exchange = _Exchange(self.service, scope, f"{scope['method']} {path}", receive, send)
        exchange.metrics = self.metrics
        try:
            await self.app(scope, exchange.receive, exchange.send)
        except BaseException as exc:
            exchange.finish(exc)
            raise
        exchange.finish(None)


class _Exchange:
    """One audited request: its row queued as it arrives, committed before its response starts,
    completed exactly once when it ends."""

    def __init__(
        self, service: AuditService, scope: Scope, endpoint: str, receive: Receive, send: Send
    ) -> None:
        self.service = service
        self.endpoint = endpoint[:_MAX_ENDPOINT_CHARS]
        self.details = AuditDetails(request_id=uuid4().hex)
        scope.setdefault("state", {})[AUDIT_STATE_KEY] = self.details
        self._receive = receive
        self._send = send
        self.status: int | None = None
        self.error_body: bytearray | None = None
        self.ended_at: float | None = None
        self.disconnected = False
        self.recorded = False
        self.scope = scope
        self.metrics: ServerMetrics | None = None
        self.row = AuditLog(request_id=self.details.request_id, created_at=utcnow(), endpoint=self.endpoint)
        self._loop = asyncio.get_running_loop()
        self._started = asyncio.Event()  # the row is committed, in flight
        self._ended = asyncio.Event()  # its end is committed
        self.queued = service.begin(self.row, written=self._setter(self._started))

    def _setter(self, event: asyncio.Event) -> Callable[[], None]:
        def written() -> None:  # on the writer thread
            self._loop.call_soon_threadsafe(event.set)

        return written

    async def receive(self) -> Message:
        message = await self._receive()
        if message["type"] == "http.disconnect" and not self.recorded:
            self.disconnected = True
            self.ended_at = self.ended_at or time.perf_counter()
        return message

    async def send(self, message: Message) -> None:
        if message["type"] == "http.response.start":
            await self._committed(self._started)
            self._queue_known()
            self.status = int(message["status"])
            headers = MutableHeaders(scope=message)
            headers.append(REQUEST_ID_HEADER, self.details.request_id)
            if self.details.rejected_tool_calls:  # known before a whole (non-streamed) reply starts
                reasons = "; ".join(self.details.rejected_tool_calls)
                headers.append(REJECTED_CALLS_HEADER, header_text(reasons))
            if self.status >= 400 and "json" in Headers(raw=message["headers"]).get("content-type", ""):
                self.error_body = bytearray()  # only error bodies are kept, never streams
        elif message["type"] == "http.response.body" and self.error_body is not None:
            self.error_body.extend(message.get("body", b"")[: _MAX_ERROR_BODY - len(self.error_body)])
        final = message["type"] == "http.response.body" and not message.get("more_body", False)
        if final and not self.disconnected:  # the row is complete before the response is
            self.ended_at = time.perf_counter()
            if self._record(self.status or 500):
                await self._committed(self._ended)
        try:
            await self._send(message)
        except OSError:  # ASGI 2.4 servers raise when the client has gone
            self.disconnected = True
            self.ended_at = self.ended_at or time.perf_counter()
            if final:  # recorded as answered, but the last bytes never left
                self.service.update(self.row, {"status": CLIENT_CLOSED_REQUEST, "error": _CLOSED})
            raise
        if final and not self.recorded:  # finished after the client left: nobody got it
            self._record(CLIENT_CLOSED_REQUEST)

    async def _committed(self, event: asyncio.Event) -> None:
        """Wait (bounded by ACK_WAIT_S) until the writer has committed what `event` stands for:
        the row before the status line goes out (a kill of the server cannot lose the row of a
        request it answered), its end before the last byte does (a client holding its whole
        response finds its row complete, and "interrupted" means it did not get all of it)."""
        if not self.queued or event.is_set():
            return
        try:
            await asyncio.wait_for(event.wait(), ACK_WAIT_S)
        except TimeoutError:
            logger.warning("audit row of %s not written within %.1f s; answering", self.endpoint, ACK_WAIT_S)

    def _queue_known(self) -> None:
        """What the handler knows as the response starts (model, protocol, key), which an
        interrupted row keeps."""
        known = {name: value for name, value in self._fields().items() if value is not None}
        if known:
            self.service.update(self.row, known)

    def finish(self, exc: BaseException | None) -> None:
        """The app returned or raised: record if the last byte never went out."""
        if self.recorded:
            return
        if self.disconnected:
            status = CLIENT_CLOSED_REQUEST
        elif isinstance(exc, Exception) or self.status is None:
            status = 500
        else:
            status = self.status  # started but never completed (e.g. cancelled)
        if isinstance(exc, Exception) and not self.details.error:
            self.details.error = f"{type(exc).__name__}: {exc}"
        self._record(status)

    def _fields(self) -> dict[str, Any]:
        """The details as the row stores them, each bounded (utils/bounded.py)."""
        details = self.details
        return {
            "model": clip(details.model, _MAX_MODEL_CHARS) if details.model else details.model,
            "protocol": details.protocol,
            "stream": details.stream,
            "parameters": bounded(details.parameters) if details.parameters is not None else None,
            "key_name": details.key_name,
        }

    def _record(self, status: int) -> bool:
        """Queue the row's end; True when queued (its commit then sets `_ended`)."""
        self.recorded = True
        try:
            details = self.details
            ended = self.ended_at or time.perf_counter()
            error = details.error
            if error is None and self.error_body:
                error = _error_message(bytes(self.error_body))
            if error is None and status == CLIENT_CLOSED_REQUEST:
                error = _CLOSED
            fields = self._fields() | {
                "state": AuditState.COMPLETED,
                "status": status,
                "latency_ms": (ended - details.started) * 1000,
                "ttft_ms": details.ttft_ms,
                "prompt_tokens": details.prompt_tokens,
                "completion_tokens": details.completion_tokens,
                "audio_seconds": details.audio_seconds,
                "error": clip(error, _MAX_ERROR_CHARS) if error else None,
                "backend": details.backend,
                "warnings": bounded(details.warnings) if details.warnings else details.warnings,
            }
            if self.metrics is not None:
                self.metrics.observe(AuditLog.model_construct(**fields), route_label(self.scope))
            return self.service.update(self.row, fields, written=self._setter(self._ended))
        except Exception:  # the audit log must never fail a request
            logger.exception("could not record the audit row for %s", self.endpoint)
            return False
