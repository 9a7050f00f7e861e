"""A model's defaults (models/defaults.py): read, checked against the model, stored on its row
and applied to the loaded model at once (no reload: they are read per request)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from sqlmodel import Session

from mlx_server.database import background_session
from mlx_server.errors import APIError, ModelNotFoundError
from mlx_server.models.defaults import ModelDefaults, ModelDefaultsError, checked_defaults
from mlx_server.models.detection import read_config
from mlx_server.models.loaders import LoadedModel, trained_context_length
from mlx_server.records import ModelRecord


def _record(session: Session, model_id: str) -> ModelRecord:
    record = session.get(ModelRecord, model_id)
    if record is None:
        raise ModelNotFoundError(model_id)
    return record


def model_defaults(session: Session, model_id: str) -> ModelDefaults:
    """The defaults set for `model_id` (empty when none are); ModelNotFoundError if unknown."""
    return ModelDefaults.from_stored(_record(session, model_id).defaults)


# How old a loaded model's defaults may be before a request reads them again: a change made by
# another process (`mlx-manager models set` beside a running server) applies within this; one
# made in this process applies to the next request (the version below).
REFRESH_S = 2.0
_version = 0  # bumped by every change made in this process


def current_defaults(loaded: LoadedModel) -> ModelDefaults:
    """The defaults a request for `loaded` runs with (its base model's, for a LoRA variant)."""
    now = time.monotonic()
    if loaded.defaults_version != _version or now - loaded.defaults_read_at >= REFRESH_S:
        version = _version
        base_id = loaded.model_id.split("+", 1)[0]  # ids never hold "+"; "<base>+<adapter>"
        with background_session() as session:  # the generation path, not a request's session
            record = session.get(ModelRecord, base_id)
        if record is not None:
            loaded.defaults = ModelDefaults.from_stored(record.defaults)
        loaded.defaults_read_at, loaded.defaults_version = now, version
    return loaded.defaults


def _invalid(message: str, param: str = "defaults") -> APIError:
    return APIError(400, message, param=param, code="invalid_model_defaults")


def _check_context(model_id: str, path: Path, defaults: ModelDefaults) -> None:
    """A context longer than the model was trained for would run it past its positions."""
    trained = trained_context_length(read_config(path))
    if defaults.context_length is not None and trained is not None and defaults.context_length > trained:
        raise _invalid(
            f"context_length {defaults.context_length} is more than {model_id!r} was trained for "
            f"({trained} tokens); set at most {trained}.",
            "context_length",
        )
    context, max_tokens = defaults.context_length, defaults.max_tokens
    if max_tokens is not None and context is not None and max_tokens >= context:
        raise _invalid(
            f"max_tokens {max_tokens} leaves no room for a prompt in a context of {context} tokens; "
            "set it lower.",
            "max_tokens",
        )


def set_model_defaults(session: Session, model_id: str, defaults: ModelDefaults) -> ModelDefaults:
    """Replace the model's defaults (PUT); checked against its config, stored, and used from
    the next request on (loaded or not)."""
    global _version
    record = _record(session, model_id)
    _check_context(model_id, Path(record.path), defaults)
    record.defaults = defaults.stored()
    session.add(record)
    session.commit()
    _version += 1
    return defaults


def update_model_defaults(session: Session, model_id: str, changes: dict[str, Any]) -> ModelDefaults:
    """Change the keys in `changes` (PATCH; None clears one), keep the others."""
    try:
        merged = model_defaults(session, model_id).changed(changes)
    except ModelDefaultsError as exc:
        raise _invalid(str(exc), next(iter(changes), "defaults")) from None
    return set_model_defaults(session, model_id, merged)


def replace_model_defaults(session: Session, model_id: str, values: dict[str, Any]) -> ModelDefaults:
    """PUT with a plain dict: every key not in `values` is cleared."""
    try:
        defaults = checked_defaults(values)
    except ModelDefaultsError as exc:
        raise _invalid(str(exc)) from None
    return set_model_defaults(session, model_id, defaults)
