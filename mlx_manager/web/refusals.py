"""What a form or a command says when its input is refused: the first field and its problem from a
validation error, or the service's own message."""

from __future__ import annotations

from pydantic import ValidationError

from mlx_server.facade import APIError


def refusal_message(exc: ValidationError | APIError) -> str:
    if isinstance(exc, APIError):
        return exc.message
    first = exc.errors()[0]
    return f"{'.'.join(str(part) for part in first['loc'])}: {first['msg']}"
