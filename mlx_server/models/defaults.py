"""ModelDefaults: what a model runs with when a request leaves it out (the one type for them).

Set per model on its page, with `mlx-manager models set ID KEY=VALUE` and over the admin API;
stored as JSON on the models row (`models.defaults`), carried by the loaded model and applied by
every protocol (services/pipeline/model_defaults.py). Every field is optional: None is "not set"
(the request's value, else the protocol's or the server's default, applies).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from mlx_server.config import MAX_PROMPT_LOOKUP_TOKENS

MAX_CONTEXT_LENGTH = 1 << 24
MAX_SYSTEM_PROMPT_CHARS = 100_000
# Stop strings a model may keep as its default (Ollama's Modelfiles set a few: "<|im_end|>", ...).
MAX_STOP_STRINGS = 16
MAX_STOP_CHARS = 1024
MAX_BEAM_SIZE = 16  # Whisper's beams; each is one more row in every decoding step
# What `models set ID KEY=` accepts for "clear this default".
CLEAR_WORDS = ("", "none", "null", "default", "unset")

ContextOverflow = Literal["error", "truncate"]


class ModelDefaultsError(ValueError):
    """A default was refused; the message names the key and what it accepts."""


class ModelDefaults(BaseModel):
    """A model's defaults; None: not set."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    context_length: int | None = Field(
        default=None, ge=16, le=MAX_CONTEXT_LENGTH, description="The most tokens (prompt + reply) to run"
    )
    context_overflow: ContextOverflow | None = Field(
        default=None,
        description='A longer prompt: "error" (a 400 naming the limit, the default) or "truncate" '
        "(the oldest messages are dropped until it fits)",
    )
    temperature: float | None = Field(default=None, ge=0.0, le=2.0)
    top_p: float | None = Field(default=None, gt=0.0, le=1.0)
    top_k: int | None = Field(default=None, ge=0)
    min_p: float | None = Field(default=None, ge=0.0, le=1.0)
    repetition_penalty: float | None = Field(default=None, gt=0.0, le=10.0)
    max_tokens: int | None = Field(default=None, ge=1, le=MAX_CONTEXT_LENGTH, description="Reply length")
    stop: list[Annotated[str, Field(min_length=1, max_length=MAX_STOP_CHARS)]] | None = Field(
        default=None, max_length=MAX_STOP_STRINGS, description="Stop strings, when a request sends none"
    )
    system_prompt: str | None = Field(default=None, max_length=MAX_SYSTEM_PROMPT_CHARS)
    thinking: bool | None = Field(default=None, description="Reasoning on or off where the template can")
    beam_size: int | None = Field(
        default=None,
        ge=1,
        le=MAX_BEAM_SIZE,
        description="Speech to text: beams of Whisper's beam search at temperature 0 (1: greedy)",
    )

    prompt_lookup: int | None = Field(
        default=None,
        ge=0,
        le=MAX_PROMPT_LOOKUP_TOKENS,
        description="Text: prompt lookup's drafted tokens per step (0: off)",
    )

    @field_validator("stop", mode="before")
    @classmethod
    def _one_stop(cls, value: Any) -> Any:
        """One string is a list of one (`models set ID stop=...`, Ollama's single stop)."""
        return [value] if isinstance(value, str) else value

    @property
    def truncates(self) -> bool:
        return self.context_overflow == "truncate"

    def stored(self) -> dict[str, Any] | None:
        """The JSON kept on the models row: only what is set (None when nothing is)."""
        return self.model_dump(exclude_none=True) or None

    @classmethod
    def from_stored(cls, value: object) -> ModelDefaults:
        """The row's JSON; a value this version cannot read counts as unset (never a failed load)."""
        if not isinstance(value, dict):
            return cls()
        try:
            return cls.model_validate(value)
        except ValidationError:
            return cls.model_validate({k: v for k, v in value.items() if _valid_field(k, v)})

    def changed(self, changes: dict[str, Any]) -> ModelDefaults:
        """These defaults with `changes` applied (None clears a key); refused with what to fix."""
        return checked_defaults({**self.model_dump(), **changes})


def _valid_field(key: str, value: object) -> bool:
    try:
        ModelDefaults.model_validate({key: value})
    except ValidationError:
        return False
    return True


def checked_defaults(values: dict[str, Any]) -> ModelDefaults:
    """Validate `values` (a whole set of defaults); ModelDefaultsError names the first bad key."""
    try:
        return ModelDefaults.model_validate(values)
    except ValidationError as exc:
        error = exc.errors()[0]
        key = ".".join(str(part) for part in error["loc"]) or "defaults"
        known = ", ".join(ModelDefaults.model_fields)
        if error["type"] == "extra_forbidden":
            raise ModelDefaultsError(f"There is no default {key!r}; the keys are: {known}.") from None
        raise ModelDefaultsError(f"{key}: {error['msg']} (got {error.get('input')!r}).") from None


def parse_assignments(pairs: list[str]) -> dict[str, Any]:
    """`KEY=VALUE` words (the command line) as changes: numbers and true/false are read as
    such, an empty value or "none"/"default" clears the key. Checked by `ModelDefaults.changed`."""
    changes: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        key = key.strip().replace("-", "_")
        if not sep or not key:
            raise ModelDefaultsError(f"{pair!r} is not KEY=VALUE (e.g. temperature=0.2 context_length=8192).")
        if key not in ModelDefaults.model_fields:
            known = ", ".join(ModelDefaults.model_fields)
            raise ModelDefaultsError(f"There is no default {key!r}; the keys are: {known}.")
        if key in ("system_prompt", "stop"):  # taken as typed; only an empty one clears it
            changes[key] = value or None
        else:
            changes[key] = None if value.strip().lower() in CLEAR_WORDS else value.strip()
    return changes
