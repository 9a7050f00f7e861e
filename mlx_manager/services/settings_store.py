"""Dashboard settings for the hub and downloads: defaults from the environment, overrides in the DB.

Each setting's default is what `huggingface_hub` itself would use (it reads `HF_ENDPOINT`,
`HF_HUB_CACHE` / `HF_HOME` and `HF_TOKEN` or the saved login), so models a user already has in
the hub cache stay visible. An override stored from the dashboard wins until it is cleared.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar

from huggingface_hub import constants as hf_constants
from sqlmodel import Session

from mlx_server.services.setting_overrides import delete_override, read_override, write_override

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

SETTINGS: dict[str, Setting[Any]] = {s.key: s for s in (HUB_ENDPOINT, HUB_TOKEN, HUB_CACHE_DIR, AUTO_PROBE)}


class SettingError(ValueError):
    """A value was refused; the message says what is expected."""


def get_setting(session: Session, setting: Setting[T]) -> T:
    """The stored override, else the default."""
    value = read_override(session, setting.key)
    if isinstance(value, setting.kind):
        return value  # type: ignore[return-value]  # checked against the setting's kind
    return setting.default()


def set_setting(session: Session, setting: Setting[T], value: T) -> None:
    """Store an override; None (or an empty string) clears it, returning to the default."""
    if value is None or value == "":
        delete_override(session, setting.key)
        return
    if not isinstance(value, setting.kind):
        raise SettingError(f"{setting.key} must be a {setting.kind.__name__}, not {type(value).__name__}")
    if setting is HUB_ENDPOINT and not str(value).startswith(("http://", "https://")):
        raise SettingError(
            f"hub_endpoint must be an http(s) URL such as https://huggingface.co, not {value!r}"
        )
    if setting is HUB_CACHE_DIR and not Path(str(value)).expanduser().is_absolute():
        raise SettingError(f"hub_cache_dir must be an absolute path, not {value!r}")
    write_override(session, setting.key, value)


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
