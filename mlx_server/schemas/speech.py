"""OpenAI speech types (POST /v1/audio/speech)."""

from __future__ import annotations

from typing import Literal

from pydantic import ConfigDict, Field

from mlx_server.schemas.limits import MAX_MODEL_NAME_CHARS, MAX_NAME_CHARS, TextOnly

ResponseFormat = Literal["mp3", "opus", "aac", "flac", "wav", "pcm"]


class SpeechRequest(TextOnly):
    model_config = ConfigDict(extra="ignore")

    model: str = Field(min_length=1, max_length=MAX_MODEL_NAME_CHARS)
    # Its length is checked by the service, whose 400 says how to split a long text.
    input: str
    voice: str = Field(max_length=MAX_NAME_CHARS)
    # OpenAI's range: a quarter of normal speed to four times it.
    speed: float = Field(default=1.0, ge=0.25, le=4.0)
    response_format: ResponseFormat = "mp3"
    # OpenAI's voice direction for its gpt-4o voices; no local model reads it.
    instructions: str | None = Field(default=None, max_length=4096)
