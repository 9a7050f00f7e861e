"""Audit every /v1 and /api (Ollama) request: one row when its response ends (last byte sent or
client gone).

A pure ASGI middleware, not BaseHTTPMiddleware: it sees a streamed body chunk by chunk, so it
can time the last byte and notice a client leaving mid-stream. Handlers add what only they
know (model, tokens, time to first token) to `audit_details(request)`; the middleware reads
those details when the response ends, so a streaming handler can fill them while it streams.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Annotated, Any
from uuid import uuid4

from fastapi import Depends, Request
from pydantic import BaseModel
from starlette.datastructures import Headers, MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from mlx_server.records import AuditLog, utcnow
from mlx_server.services.operations.audit import AuditService, audit_service
from mlx_server.services.pipeline.generation import CompletionStats

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
AUDITED_PREFIXES = ("/v1", "/api")
NOT_AUDITED = frozenset({"/v1/health"})  # polled by monitors; would drown the log
_MAX_ERROR_BODY = 64 * 1024
_MAX_ERROR_CHARS = 4000
_MAX_ENDPOINT_CHARS = 128  # the column's declared length
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
    if "endpoint" not in scope:  # set by the router on a match
        return f"{scope['method']} (unmatched)"
    rest, route = full_path(scope), ""
    for name, value in reversed(scope.get("path_params", {}).items()):  # right to left
        head, found, tail = rest.rpartition(str(value))
        if found:
            rest, route = head, "{" + name + "}" + tail + route
    return f"{scope['method']} {rest}{route}"


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
    """One audited request: watches its messages and records its row exactly once."""

    def __init__(
        self, service: AuditService, scope: Scope, endpoint: str, receive: Receive, send: Send
    ) -> None:
        self.service = service
        self.endpoint = endpoint[:_MAX_ENDPOINT_CHARS]
        self.created_at = utcnow()
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

    async def receive(self) -> Message:
        message = await self._receive()
        if message["type"] == "http.disconnect" and not self.recorded:
            self.disconnected = True
            self.ended_at = self.ended_at or time.perf_counter()
        return message

    async def send(self, message: Message) -> None:
        if message["type"] == "http.response.start":
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
        try:
            await self._send(message)
        except OSError:  # ASGI 2.4 servers raise when the client has gone
            self.disconnected = True
            self.ended_at = self.ended_at or time.perf_counter()
            raise
        if message["type"] == "http.response.body" and not message.get("more_body", False):
            if self.disconnected:  # finished after the client left: nobody got it
                self._record(CLIENT_CLOSED_REQUEST)
            else:
                self.ended_at = time.perf_counter()
                self._record(self.status or 500)

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

    def _record(self, status: int) -> None:
        self.recorded = True
        try:
            details = self.details
            ended = self.ended_at or time.perf_counter()
            error = details.error
            if error is None and self.error_body:
                error = _error_message(bytes(self.error_body))
            if error is None and status == CLIENT_CLOSED_REQUEST:
                error = "The client closed the connection before the response was complete."
            row = AuditLog(
                request_id=details.request_id,
                created_at=self.created_at,
                endpoint=self.endpoint,
                model=details.model,
                status=status,
                latency_ms=(ended - details.started) * 1000,
                ttft_ms=details.ttft_ms,
                protocol=details.protocol,
                stream=details.stream,
                prompt_tokens=details.prompt_tokens,
                completion_tokens=details.completion_tokens,
                audio_seconds=details.audio_seconds,
                error=error[:_MAX_ERROR_CHARS] if error else None,
                parameters=details.parameters,
                key_name=details.key_name,
                backend=details.backend,
                warnings=details.warnings,
            )
            if self.metrics is not None:  # before the writer thread owns the row
                self.metrics.observe(row, route_label(self.scope))
            self.service.record(row)
        except Exception:  # the audit log must never fail a request
            logger.exception("could not record the audit row for %s", self.endpoint)
