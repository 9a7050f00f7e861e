"""The model page's defaults form (context length, sampling, system prompt, thinking), and the
values a new playground chat with the model starts from. The server checks, stores and applies
them (`set_model_defaults` in the facade); an empty field is "not set"."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sqlmodel import Session

from mlx_manager.services.settings_store import MAX_CHAT_TOKENS
from mlx_server.facade import APIError, ModelDefaults, model_defaults, set_model_defaults

FIELDS = tuple(ModelDefaults.model_fields)
THINKING = {"on": True, "off": False}
# The playground's parameters a model's defaults set (its panel has no min-p or repetition penalty).
CHAT_PARAMETERS = ("temperature", "top_p", "top_k", "max_tokens")


def defaults_inputs(defaults: ModelDefaults) -> dict[str, str]:
    """The form's fields: each value as text, "" when not set; thinking as on/off."""
    inputs = {key: "" if value is None else str(value) for key, value in defaults.model_dump().items()}
    inputs["thinking"] = {True: "on", False: "off"}.get(defaults.thinking, "")  # type: ignore[arg-type]
    return inputs


def save_defaults_form(session: Session, model_id: str, form: Mapping[str, str]) -> ModelDefaults:
    """Replace the model's defaults with the form's; ModelDefaultsError or the server's APIError
    say what to fix."""
    values: dict[str, Any] = {}
    for key in FIELDS:
        text = form.get(key, "")
        text = text.strip() if key != "system_prompt" else text
        values[key] = THINKING.get(text) if key == "thinking" else (text or None)
    return set_model_defaults(session, model_id, ModelDefaults().changed(values))


def chat_parameters(session: Session, model_id: str | None) -> dict[str, Any]:
    """What a new playground chat with `model_id` takes from its defaults (sampling, max tokens,
    thinking); the system prompt and the rest apply in the pipeline when the chat leaves them out."""
    if model_id is None:
        return {}
    try:
        defaults = model_defaults(session, model_id)
    except APIError:  # the model is gone
        return {}
    found: dict[str, Any] = {key: getattr(defaults, key) for key in CHAT_PARAMETERS}
    if defaults.max_tokens is not None:
        found["max_tokens"] = min(defaults.max_tokens, MAX_CHAT_TOKENS)
    found["enable_thinking"] = defaults.thinking
    return {key: value for key, value in found.items() if value is not None}
