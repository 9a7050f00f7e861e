"""Dashboard settings for the hub, downloads and the playground: defaults from the environment,
overrides in the DB.

Each setting's default is what `huggingface_hub` itself would use (it reads `HF_ENDPOINT`,
`HF_HUB_CACHE` / `HF_HOME` and `HF_TOKEN` or the saved login), so models a user already has in
the hub cache stay visible. An override stored from the dashboard wins until it is cleared.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar

from huggingface_hub import constants as hf_constants
from sqlmodel import Session

from mlx_server.facade import delete_override, read_override, write_override

T = TypeVar("T")


@dataclass(frozen=True)
class Setting(Generic[T]):
    key: str
    kind: type
    default: Callable[[], T]
    description: str
    # Secrets are never rendered: `display_value` masks them.
    secret: bool = False


HUB_ENDPOINT: Setting[str] = Setting(
    "hub_endpoint", str, lambda: hf_constants.ENDPOINT, "Hugging Face hub URL (default HF_ENDPOINT)"
)
HUB_TOKEN: Setting[str | None] = Setting(
    "hub_token", str, lambda: None, "Hub access token for gated and private models", secret=True
)
HUB_CACHE_DIR: Setting[str] = Setting(
    "hub_cache_dir", str, lambda: hf_constants.HF_HUB_CACHE, "Download cache (default HF_HUB_CACHE)"
)
AUTO_PROBE: Setting[bool] = Setting(
    "auto_probe_downloads", bool, lambda: True, "Probe each model once its download completes"
)

# Sampling defaults for new playground conversations (the playground's own ranges).
DEFAULT_CHAT_PARAMETERS: dict[str, float | int] = {
    "temperature": 0.7,
    "top_p": 1.0,
    "top_k": 0,
    "max_tokens": 512,
}
MAX_CHAT_TOKENS = 32768
CHAT_DEFAULTS: Setting[dict[str, float | int]] = Setting(
    "chat_defaults",
    dict,
    lambda: dict(DEFAULT_CHAT_PARAMETERS),
    "Temperature, top-p, top-k and max tokens for new playground conversations",
)

SETTINGS: dict[str, Setting[Any]] = {
    s.key: s for s in (HUB_ENDPOINT, HUB_TOKEN, HUB_CACHE_DIR, AUTO_PROBE, CHAT_DEFAULTS)
}


class SettingError(ValueError):
    """A value was refused; the message says what is expected."""


def _number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def check_chat_defaults(values: Mapping[str, Any]) -> dict[str, float | int]:
    """`values` (missing ones from DEFAULT_CHAT_PARAMETERS) checked and normalized; the
    SettingError names every value out of range."""
    unknown = sorted(set(values) - set(DEFAULT_CHAT_PARAMETERS))
    if unknown:
        known = ", ".join(DEFAULT_CHAT_PARAMETERS)
        raise SettingError(f"Unknown generation parameters {', '.join(unknown)}; known: {known}.")
    merged: dict[str, Any] = {**DEFAULT_CHAT_PARAMETERS, **values}
    temperature, top_p, top_k, max_tokens = (merged[k] for k in DEFAULT_CHAT_PARAMETERS)
    problems = []
    if not (_number(temperature) and 0 <= temperature <= 2):
        problems.append(f"Temperature must be between 0 and 2, not {temperature}.")
    if not (_number(top_p) and 0 < top_p <= 1):
        problems.append(f"Top-p must be above 0 and at most 1, not {top_p}.")
    if not (type(top_k) is int and top_k >= 0):
        problems.append(f"Top-k must be a whole number, 0 (off) or more, not {top_k}.")
    if not (type(max_tokens) is int and 1 <= max_tokens <= MAX_CHAT_TOKENS):
        problems.append(f"Max tokens must be a whole number from 1 to {MAX_CHAT_TOKENS}, not {max_tokens}.")
    if problems:
        raise SettingError(" ".join(problems))
    return {
        "temperature": float(temperature),
        "top_p": float(top_p),
        "top_k": top_k,
        "max_tokens": max_tokens,
    }


def get_chat_defaults(session: Session) -> dict[str, float | int]:
    """What a new playground conversation starts with: temperature, top_p, top_k, max_tokens."""
    stored = get_setting(session, CHAT_DEFAULTS)
    try:
        return check_chat_defaults(stored)
    except SettingError:  # stored by an older version with other ranges
        return dict(DEFAULT_CHAT_PARAMETERS)


def get_setting(session: Session, setting: Setting[T]) -> T:
    """The stored override, else the default."""
    value = read_override(session, setting.key)
    if isinstance(value, setting.kind):
        return value  # type: ignore[return-value]  # checked against the setting's kind
    return setting.default()


def _absolute(path: str) -> bool:
    try:
        return Path(path).expanduser().is_absolute()
    except RuntimeError:  # "~name" of a user this machine does not have
        return False


def validate_setting(setting: Setting[Any], value: Any) -> Any:
    """The value as it would be stored, or SettingError saying what is expected."""
    if not isinstance(value, setting.kind):
        raise SettingError(f"{setting.key} must be a {setting.kind.__name__}, not {type(value).__name__}")
    if setting is HUB_ENDPOINT and not str(value).startswith(("http://", "https://")):
        raise SettingError(
            f"The hub endpoint must be an http(s) URL such as https://huggingface.co, not {value!r}."
        )
    if setting is HUB_CACHE_DIR and not _absolute(str(value)):
        raise SettingError(f"The hub cache must be an absolute path (/Users/me/hf-cache), not {value!r}.")
    if setting is HUB_TOKEN and any(c.isspace() for c in str(value)):
        raise SettingError("The hub token cannot contain spaces; paste it as the hub shows it (hf_...).")
    if setting is CHAT_DEFAULTS and isinstance(value, dict):
        return check_chat_defaults(value)
    return value


def set_setting(session: Session, setting: Setting[T], value: T | None) -> None:
    """Store an override; None (or an empty string) clears it, returning to the default."""
    if value is None or value == "":
        delete_override(session, setting.key)
        return
    write_override(session, setting.key, validate_setting(setting, value))


def mask_secret(value: str | None) -> str:
    """What a page may show of a secret: its prefix and last four characters ("hf_…abcd")."""
    if not value:
        return "not set"
    if len(value) <= 8:
        return "…" + "*" * 4
    prefix = value[:3] if value.startswith("hf_") else ""
    return f"{prefix}…{value[-4:]}"


def display_value(session: Session, setting: Setting[T]) -> str:
    """The setting's value as a page may render it (secrets masked)."""
    value = get_setting(session, setting)
    if setting.secret:
        return mask_secret(value if isinstance(value, str) else None)
    return "" if value is None else str(value)
