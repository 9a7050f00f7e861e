"""The model page's generation options form: a draft model for speculative decoding and KV cache
quantization (the server checks, stores and applies them: model_options in the facade)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlmodel import Session

from mlx_server.facade import (
    KV_BITS,
    KV_GROUP_SIZES,
    ModelOptions,
    draft_candidates,
    model_options,
    pool_status,
    set_model_options,
)


@dataclass(frozen=True)
class OptionsView:
    options: ModelOptions
    # Local text models that may draft (the vocabulary is checked on save).
    candidates: list[str]
    kv_bits_choices: tuple[int, ...]
    group_sizes: tuple[int, ...]
    # The pool's figures while the model is loaded (draft acceptance since the load), else None.
    loaded: dict[str, Any] | None


def options_view(session: Session, model_id: str) -> OptionsView:
    loaded = next((m for m in pool_status()["models"] if m["id"] == model_id), None)
    options, candidates = model_options(session, model_id), draft_candidates(session, model_id)
    return OptionsView(options, candidates, KV_BITS, KV_GROUP_SIZES, loaded)


def _number(value: str, name: str) -> int | None:
    value = value.strip()
    if value in ("", "none"):
        return None
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"{name} must be a whole number, not {value!r}.") from None


async def save_options_form(
    session: Session, model_id: str, *, draft_model: str, kv_bits: str, kv_group_size: str
) -> str:
    """Set the options from the form's fields; the message for the page. Raises ValueError or
    the server's APIError with what to fix."""
    options = await set_model_options(
        session,
        model_id,
        draft_model=draft_model.strip() or None,
        kv_bits=_number(kv_bits, "KV cache bits"),
        kv_group_size=_number(kv_group_size, "KV group size"),
    )
    draft = f"drafts with {options.draft_model}" if options.draft_model else "no draft model"
    kv = f"{options.kv_bits}-bit KV cache" if options.kv_bits else "full-precision KV cache"
    return f"Saved: {draft}, {kv}."
