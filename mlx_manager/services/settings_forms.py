"""The Settings page's sections: what each form shows, and each form's input checked and saved
through the services that own the setting (nothing is stored unless the whole form is valid).

Every section is a dict for the templates: `inputs` (what the fields show: the stored values, or
the user's input when it was refused; not `values`, which Jinja reads as dict.values), `error`,
`message`, and what the section explains.
"""

from __future__ import annotations

import math
from typing import Any

from pydantic import BaseModel
from sqlmodel import Session

from mlx_manager.config import ManagerSettings
from mlx_manager.services.forms import FormError
from mlx_manager.services.settings_store import (
    AUTO_PROBE,
    CHAT_DEFAULTS,
    HUB_CACHE_DIR,
    HUB_ENDPOINT,
    HUB_TOKEN,
    MAX_CHAT_TOKENS,
    SettingError,
    check_chat_defaults,
    display_value,
    get_chat_defaults,
    get_setting,
    set_setting,
    validate_setting,
)
from mlx_server.facade import (
    MAX_DEFAULT_MAX_TOKENS,
    default_max_tokens_setting,
    get_server_settings,
    pool_limits,
    read_override,
    reset_pool_limits,
    set_default_max_tokens,
    set_pool_limits,
)


class PoolForm(BaseModel):
    max_memory_gb: str = ""
    max_models: str = ""
    idle_ttl_seconds: str = ""
    reset: str = ""

    def shown(self) -> dict[str, str]:
        return self.model_dump(exclude={"reset"})


class HubForm(BaseModel):
    endpoint: str = ""
    token: str = ""  # empty keeps the stored token
    cache_dir: str = ""
    auto_probe: str = ""  # a checkbox: present when checked
    clear_token: str = ""

    def shown(self) -> dict[str, Any]:
        """The input to show again: never the token (a page must not hold it)."""
        return {"endpoint": self.endpoint, "cache_dir": self.cache_dir, "auto_probe": bool(self.auto_probe)}


class GenerationForm(BaseModel):
    temperature: str = ""
    top_p: str = ""
    top_k: str = ""
    max_tokens: str = ""
    api_max_tokens: str = ""  # empty: MLX_SERVER_DEFAULT_MAX_TOKENS
    reset: str = ""

    def shown(self) -> dict[str, str]:
        return self.model_dump(exclude={"reset"})


def _float(text: str, label: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise FormError(f"{label} must be a number, not {text.strip()!r}.") from None
    if not math.isfinite(value):
        raise FormError(f"{label} must be a finite number, not {text.strip()!r}.")
    return value


def _int(text: str, label: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise FormError(f"{label} must be a whole number, not {text.strip()!r}.") from None


def _sentence(message: str) -> str:
    """Service messages start in lower case ("memory budget must be ..."): capitalize for a page."""
    message = message[:1].upper() + message[1:]
    return message if message.endswith(".") else message + "."


# --- Pool: the limits pool_admin stores and applies live (shared with the Server page) ---


def pool_section(session: Session) -> dict[str, Any]:
    limits = pool_limits(session)
    values = {
        "max_memory_gb": f"{round(limits.max_memory_gb, 2):g}",
        "max_models": str(limits.max_models),
        "idle_ttl_seconds": f"{limits.idle_ttl_seconds:g}",
    }
    return {"inputs": values, "overridden": sorted(limits.overridden)}


def save_pool(session: Session, form: PoolForm) -> str:
    if form.reset:
        reset_pool_limits(session)
        return "Pool limits are the environment's again."
    try:
        set_pool_limits(
            session,
            max_memory_gb=_float(form.max_memory_gb, "Memory budget"),
            max_models=_int(form.max_models, "Max models"),
            idle_ttl_seconds=_float(form.idle_ttl_seconds, "Idle unload"),
        )
    except ValueError as exc:
        raise FormError(_sentence(str(exc))) from None
    return "Pool limits saved and applied."


# --- Hub: settings_store, read by the hub code on every search and download ---


def hub_section(session: Session) -> dict[str, Any]:
    token_set = get_setting(session, HUB_TOKEN) is not None
    return {
        # Inputs show overrides only; the default is the placeholder, so it can still change.
        "inputs": {
            "endpoint": read_override(session, HUB_ENDPOINT.key) or "",
            "cache_dir": read_override(session, HUB_CACHE_DIR.key) or "",
            "auto_probe": get_setting(session, AUTO_PROBE),
        },
        "endpoint_default": HUB_ENDPOINT.default(),
        "cache_dir_default": HUB_CACHE_DIR.default(),
        "token_display": display_value(session, HUB_TOKEN),  # masked, never the token
        "token_set": token_set,
    }


def save_hub(session: Session, form: HubForm) -> str:
    if form.clear_token:
        set_setting(session, HUB_TOKEN, None)
        return "Hub token removed."
    endpoint, cache_dir, token = form.endpoint.strip(), form.cache_dir.strip(), form.token.strip()
    problems = []
    for setting, value in ((HUB_ENDPOINT, endpoint), (HUB_CACHE_DIR, cache_dir), (HUB_TOKEN, token)):
        try:
            if value:
                validate_setting(setting, value)
        except SettingError as exc:
            problems.append(_sentence(str(exc)))
    if problems:
        raise FormError(" ".join(problems))
    set_setting(session, HUB_ENDPOINT, endpoint or None)
    set_setting(session, HUB_CACHE_DIR, cache_dir or None)
    set_setting(session, AUTO_PROBE, bool(form.auto_probe))
    if token:  # an empty field keeps the stored token (the page never holds it)
        set_setting(session, HUB_TOKEN, token)
    return "Hub settings saved."


# --- Generation defaults: the playground's, and the API's max_tokens ---


def generation_section(session: Session) -> dict[str, Any]:
    chat = get_chat_defaults(session)
    api = default_max_tokens_setting(session)
    values = {key: f"{value:g}" for key, value in chat.items()}
    values["api_max_tokens"] = str(api.value) if api.overridden else ""
    return {
        "inputs": values,
        "chat_overridden": read_override(session, CHAT_DEFAULTS.key) is not None,
        "api_overridden": api.overridden,
        "api_environment": get_server_settings().default_max_tokens,
        "max_chat_tokens": MAX_CHAT_TOKENS,
        "max_api_tokens": MAX_DEFAULT_MAX_TOKENS,
    }


def save_generation(session: Session, form: GenerationForm) -> str:
    if form.reset:
        set_setting(session, CHAT_DEFAULTS, None)
        set_default_max_tokens(session, None)
        return "Generation defaults are the built-in and environment's again."
    try:
        chat = check_chat_defaults(
            {
                "temperature": _float(form.temperature, "Temperature"),
                "top_p": _float(form.top_p, "Top-p"),
                "top_k": _int(form.top_k, "Top-k"),
                "max_tokens": _int(form.max_tokens, "Max tokens"),
            }
        )
        api = form.api_max_tokens.strip()
        set_default_max_tokens(session, _int(api, "The API's default max tokens") if api else None)
    except ValueError as exc:  # FormError, SettingError and the service's
        raise FormError(_sentence(str(exc))) from None
    set_setting(session, CHAT_DEFAULTS, chat)
    return "Generation defaults saved."


def environment_rows(settings: ManagerSettings) -> list[tuple[str, str, str]]:
    """Read-only: set as environment variables before `mlx-manager serve`."""
    return [
        ("MLX_MANAGER_HOME", str(settings.home), "Database file and imported models"),
        ("MLX_MANAGER_HOST", settings.host, "Dashboard and API bind address"),
        ("MLX_MANAGER_PORT", str(settings.port), "Dashboard and API port"),
        (
            "MLX_MANAGER_REQUIRE_LOGIN",
            "true" if settings.require_login else "false",
            "Ask for the admin password on loopback too (always asked on other binds)",
        ),
        ("Database", str(get_server_settings().database_path), "SQLite file (in the home)"),
    ]
