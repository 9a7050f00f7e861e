"""Errors as OpenAI clients expect them, plus RFC 7807 problem fields (blueprint §13.2).

Body: {"error": {"message", "type", "param", "code"}, "type", "title", "status", "detail"}.
The OpenAI SDKs read `error`; generic HTTP tooling reads the problem fields. Anthropic's
shape is `anthropic_error_response`; api/error_shapes.py picks one by the request's path.
"""

from __future__ import annotations

from http import HTTPStatus
from typing import Any

from fastapi.responses import JSONResponse

_OPENAI_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "invalid_request_error",
    422: "invalid_request_error",
    429: "rate_limit_error",
    503: "overloaded_error",
    507: "insufficient_storage_error",
}


class APIError(Exception):
    """An error the client can act on; `message` says what to change."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        param: str | None = None,
        code: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.code = code
        self.headers = headers


class ModelNotFoundError(APIError):
    def __init__(self, model_id: str) -> None:
        super().__init__(
            404,
            f"The model {model_id!r} does not exist. GET /v1/models lists the available models.",
            param="model",
            code="model_not_found",
        )


def error_response(error: APIError) -> JSONResponse:
    title = HTTPStatus(error.status).phrase
    body: dict[str, Any] = {
        "error": {
            "message": error.message,
            "type": _OPENAI_TYPES.get(error.status, "server_error" if error.status >= 500 else "api_error"),
            "param": error.param,
            "code": error.code,
        },
        "type": "about:blank",
        "title": title,
        "status": error.status,
        "detail": error.message,
    }
    return JSONResponse(body, status_code=error.status, headers=error.headers)


_ANTHROPIC_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    503: "overloaded_error",
    504: "timeout_error",
    529: "overloaded_error",
}


def anthropic_error_response(error: APIError, request_id: str | None = None) -> JSONResponse:
    """Anthropic's shape: {"type": "error", "error": {"type", "message"}, "request_id"}."""
    kind = _ANTHROPIC_TYPES.get(error.status, "api_error" if error.status >= 500 else "invalid_request_error")
    message = (
        f"{error.param}: {error.message}"
        if error.param and error.param not in error.message
        else error.message
    )
    body: dict[str, Any] = {"type": "error", "error": {"type": kind, "message": message}}
    if request_id is not None:
        body["request_id"] = request_id
    return JSONResponse(body, status_code=error.status, headers=error.headers)


def _param(loc: tuple[Any, ...] | list[Any]) -> str | None:
    """("body", "messages", 0, "role") -> "messages[0].role" (the name clients know)."""
    parts = list(loc[1:]) if loc and loc[0] in ("body", "query", "path", "header") else list(loc)
    # A union's branch name (e.g. "str", "list[...]") is not part of the field's path.
    parts = [
        p for p in parts if not (isinstance(p, str) and ("[" in p or p in ("str", "int", "float", "bool")))
    ]
    name = ""
    for part in parts:
        name += f"[{part}]" if isinstance(part, int) else (f".{part}" if name else str(part))
    return name or None


def validation_error(errors: list[Any]) -> APIError:
    # A value that fails every branch of a union gets one error per branch; the deepest one
    # names the actual problem (an unknown block type, not "should be a valid string").
    first: dict[str, Any] = max(errors, key=lambda e: len(e.get("loc", ())), default={})
    kind = first.get("type")
    if kind == "json_invalid":
        detail = (first.get("ctx") or {}).get("error", "")
        return APIError(400, f"The request body is not valid JSON ({detail}).", code="invalid_json")
    param = _param(first.get("loc", ()))
    if param is None:
        return APIError(400, "The request body must be a JSON object.", code="invalid_request")
    message = str(first.get("msg", "invalid value")).removeprefix("Value error, ")
    if kind == "missing":
        return APIError(
            400, f"Missing required parameter: {param!r}.", param=param, code="missing_required_parameter"
        )
    return APIError(400, f"Invalid value for {param!r}: {message}.", param=param, code="invalid_value")
