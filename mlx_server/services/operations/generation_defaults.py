"""The API's max_tokens for requests that set none: MLX_SERVER_DEFAULT_MAX_TOKENS, or the
dashboard's override of it (read through the override cache, so a request pays no query)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeGuard

from sqlmodel import Session

from mlx_server.config import get_settings
from mlx_server.services.operations.setting_overrides import (
    cached_override,
    delete_override,
    read_override,
    write_override,
)

DEFAULT_MAX_TOKENS_KEY = "default_max_tokens"
MAX_DEFAULT_MAX_TOKENS = 32768


@dataclass(frozen=True)
class DefaultMaxTokens:
    value: int
    overridden: bool  # set from the dashboard, else the environment's


def _valid(value: object) -> TypeGuard[int]:
    return type(value) is int and 1 <= value <= MAX_DEFAULT_MAX_TOKENS


def default_max_tokens() -> int:
    """For the request path: the override (cached), else the environment's."""
    value = cached_override(DEFAULT_MAX_TOKENS_KEY)
    return value if _valid(value) else get_settings().default_max_tokens


def default_max_tokens_setting(session: Session) -> DefaultMaxTokens:
    """For pages: the value in force, read now, and where it comes from."""
    value = read_override(session, DEFAULT_MAX_TOKENS_KEY)
    if _valid(value):
        return DefaultMaxTokens(value, overridden=True)
    return DefaultMaxTokens(get_settings().default_max_tokens, overridden=False)


def set_default_max_tokens(session: Session, value: int | None) -> DefaultMaxTokens:
    """Override with `value` (1..MAX_DEFAULT_MAX_TOKENS), or None for the environment's."""
    if value is None:
        delete_override(session, DEFAULT_MAX_TOKENS_KEY)
    elif _valid(value):
        write_override(session, DEFAULT_MAX_TOKENS_KEY, value)
    else:
        raise ValueError(
            f"The API's default max tokens must be a whole number from 1 to {MAX_DEFAULT_MAX_TOKENS}, "
            f"not {value}."
        )
    return default_max_tokens_setting(session)
