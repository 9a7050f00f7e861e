"""Every error of a /v1 or /api route in its protocol's shape, whichever layer answers it.

Anthropic's routes (/v1/messages and below) answer `{"type": "error", "error": {"type",
"message"}, "request_id"}`, Ollama's (/api and below) `{"error": "message"}`, every other
route OpenAI's shape (mlx_server/errors). The guard, the key check, the time limits and the
app's exception handlers all answer through `shaped_error`, so a 413 raised while a chunked
body is read, a 404 for an unknown sub-path, a 405, a 504 or an unexpected 500 on /v1/messages
look like every other Anthropic error (a timeout is `timeout_error` whether the request
streamed or not), and on /api like every other Ollama error.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from mlx_server.api.audit_middleware import AUDIT_STATE_KEY, AuditDetails, full_path
from mlx_server.errors import APIError, anthropic_error_response, error_response, validation_error

logger = logging.getLogger("mlx_server.errors")

ANTHROPIC_PREFIX = "/v1/messages"
OLLAMA_PREFIX = "/api"
INTERNAL_ERROR = (
    "The server failed on this request; its log has the details (look for the request id). "
    "Retry, or report it if it keeps happening."
)


def is_anthropic(scope: Scope) -> bool:
    path = full_path(scope)
    return path == ANTHROPIC_PREFIX or path.startswith(ANTHROPIC_PREFIX + "/")


def is_ollama(scope: Scope) -> bool:
    path = full_path(scope)
    return path == OLLAMA_PREFIX or path.startswith(OLLAMA_PREFIX + "/")


def ollama_error_response(error: APIError) -> JSONResponse:
    """Ollama's shape: `{"error": "..."}`; its clients raise the message with the status."""
    return JSONResponse({"error": error.message}, status_code=error.status, headers=error.headers)


def _request_id(scope: Scope) -> str | None:
    details = scope.get("state", {}).get(AUDIT_STATE_KEY)
    return details.request_id or None if isinstance(details, AuditDetails) else None


def shaped_error(scope: Scope, error: APIError) -> JSONResponse:
    """`error` in the shape of the protocol the request's path belongs to."""
    if is_anthropic(scope):
        return anthropic_error_response(error, _request_id(scope))
    if is_ollama(scope):
        return ollama_error_response(error)
    return error_response(error)


def protocol_error(scope: Scope, status: int, message: str, code: str = "request_refused") -> JSONResponse:
    """A refusal by one of the ASGI layers (guard, time limits), in the path's protocol shape."""
    return shaped_error(scope, APIError(status, message, code=code))


async def _api_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, APIError)
    return shaped_error(request.scope, exc)


async def _http_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    headers = dict(exc.headers) if exc.headers else None
    return shaped_error(request.scope, APIError(exc.status_code, str(exc.detail), headers=headers))


async def _validation_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    return shaped_error(request.scope, validation_error(list(exc.errors())))


def internal_error(scope: Scope) -> Response:
    """A bug, not the client's doing: a 500 in the protocol's shape, with nothing of the
    exception in it (it may hold paths or prompts); the log has the traceback."""
    return shaped_error(scope, APIError(500, INTERNAL_ERROR, code="internal_error"))


async def _internal_error(request: Request, exc: Exception) -> Response:
    return internal_error(request.scope)


class ContainErrors:
    """Pure ASGI: an exception a route lets escape is logged and answered with a 500 here, and
    goes no further.

    Starlette's outermost error middleware answers the 500 and then re-raises the exception
    for the server to log; uvicorn, seeing an exception after a complete response, closes the
    connection, so a keep-alive client's next request on it is reset with no `Connection: close`
    ever said. Contained here, the connection stays usable. An exception after the response
    has started but before its end still propagates: the server then cuts the connection, which
    is how an HTTP client learns that a body it was reading is incomplete."""

    def __init__(self, app: ASGIApp, respond: Callable[[Scope], Response] = internal_error) -> None:
        self.app, self.respond = app, respond

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = ended = False

        async def watched(message: Message) -> None:
            nonlocal started, ended
            started = started or message["type"] == "http.response.start"
            ended = ended or (message["type"] == "http.response.body" and not message.get("more_body", False))
            await send(message)

        try:
            await self.app(scope, receive, watched)
        except Exception as exc:
            request_id = _request_id(scope)
            details = scope.get("state", {}).get(AUDIT_STATE_KEY)
            if isinstance(details, AuditDetails) and not details.error:
                details.error = f"{type(exc).__name__}: {exc}"
            logger.exception("%s %s failed (request %s)", scope["method"], full_path(scope), request_id)
            if started and not ended:
                raise
            if not started:
                await self.respond(scope)(scope, receive, send)


def install_error_handlers(app: FastAPI) -> None:
    """The app's errors in their protocols' shapes. Called before the app's other middleware
    is added, so ContainErrors sits innermost and every layer sees the 500 as a response."""
    app.add_exception_handler(APIError, _api_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(Exception, _internal_error)  # only what escapes ContainErrors
    app.add_middleware(ContainErrors)
