"""Speech from text: check the request, lease the model, stream encoded audio as it is made.

The model speaks a text in chunks (KittenTTS: sentences of a long text; each family decides),
each chunk one job on the MLX thread, so a chat stream at the same time interleaves between
chunks. The first chunk is made before the response starts: a failure there (a voice the model
does not know when it cannot list its voices, text it cannot pronounce) is still a 400 rather
than a broken stream, and the first bytes carry real audio.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncGenerator, Callable, Iterator
from dataclasses import dataclass

import numpy as np

from mlx_server.errors import APIError
from mlx_server.models.detection import ModelType
from mlx_server.models.loaders import LoadedModel
from mlx_server.services.leased_stream import LeasedStream
from mlx_server.services.pipeline.inference import open_model
from mlx_server.services.speech.encoding import MEDIA_TYPES, Samples, check_format, make_encoder
from mlx_server.utils.metal import stream_on_metal_thread

logger = logging.getLogger("mlx_server.speech")

# OpenAI's limit per request; longer texts are split by the client.
MAX_INPUT_CHARS = 4096


@dataclass
class SpeechStats:
    """Filled as the audio is made; read by the audit row."""

    samples: int = 0
    sample_rate: int = 0
    first_audio_at: float | None = None  # perf_counter()
    error: str | None = None

    @property
    def audio_seconds(self) -> float:
        return self.samples / self.sample_rate if self.sample_rate else 0.0


class SpeechStream(LeasedStream[bytes]):
    """Encoded audio chunks as they are made; holds the model lease until the last one."""

    def __init__(
        self,
        chunks: AsyncGenerator[bytes, None],
        release: Callable[[], None],
        *,
        media_type: str,
        stats: SpeechStats,
    ) -> None:
        super().__init__(chunks, release)
        self.media_type = media_type
        self.stats = stats


def check_input(text: str) -> None:
    if not text.strip():
        raise APIError(400, "input is empty; send the text to speak.", param="input", code="empty_input")
    if len(text) > MAX_INPUT_CHARS:
        raise APIError(
            400,
            f"input is {len(text)} characters; at most {MAX_INPUT_CHARS} are accepted per request. "
            "Split the text (at sentence ends) into several requests.",
            param="input",
            code="input_too_long",
        )


def choose_voice(loaded: LoadedModel, voice: str | None) -> str | None:
    """The voice to speak with: the one asked for, checked when the model lists its voices; for
    None, the model's first listed voice (or, when it lists none, its own default)."""
    assert loaded.speech is not None, f"{loaded.model_id} is not a text-to-speech model"
    voices = loaded.speech.voices
    if voice is None:
        return voices[0] if voices else None
    if voices and voice not in voices:
        raise APIError(
            400,
            f"voice {voice!r} is not a voice of {loaded.model_id!r}; its voices are: {', '.join(voices)}.",
            param="voice",
            code="unknown_voice",
        )
    return voice


def _speak(loaded: LoadedModel, text: str, voice: str | None, speed: float) -> Iterator[Samples]:
    """The model's audio chunks as mono float32 (MLX thread)."""
    options = {"voice": voice} if voice is not None else {}
    for result in loaded.model.generate(text=text, speed=speed, verbose=False, **options):
        audio = np.asarray(result.audio, dtype=np.float32).reshape(-1)
        if audio.size:
            yield audio


async def _first(chunks: AsyncGenerator[Samples, None]) -> Samples | None:
    try:
        return await anext(chunks)
    except StopAsyncIteration:
        return None
    except ValueError as exc:  # mlx-audio's models say what they refuse with ValueError
        raise APIError(400, f"The model refused the request: {exc}", code="speech_refused") from exc


async def _encoded(
    first: Samples | None,
    rest: AsyncGenerator[Samples, None],
    response_format: str,
    stats: SpeechStats,
) -> AsyncGenerator[bytes, None]:
    encoder = make_encoder(response_format, stats.sample_rate)
    try:
        samples = first
        while samples is not None:
            stats.samples += samples.size
            if data := encoder.encode(samples):
                yield data
            samples = await anext(rest, None)
    except Exception as exc:  # the status line is gone: end the file where it stops
        logger.exception("speech stream failed")
        stats.error = f"Speech generation failed after {stats.audio_seconds:.2f} s of audio: {exc}"
    finally:
        await rest.aclose()
    if tail := encoder.finish():
        yield tail


async def synthesize_speech(
    model_id: str, text: str, *, voice: str | None, speed: float, response_format: str
) -> SpeechStream:
    """Speak `text` with `model_id`; errors a request can cause are raised before any audio."""
    check_input(text)
    loaded, release = await open_model(model_id, (ModelType.TEXT_TO_SPEECH,))
    try:
        assert loaded.speech is not None, f"{model_id} has no speech profile"
        voice = choose_voice(loaded, voice)
        check_format(response_format, loaded.speech.sample_rate)
        stats = SpeechStats(sample_rate=loaded.speech.sample_rate)
        chunks = stream_on_metal_thread(lambda: _speak(loaded, text, voice, speed))
    except BaseException:
        release()
        raise
    try:
        first = await _first(chunks)
        stats.first_audio_at = time.perf_counter()
    except BaseException:
        await chunks.aclose()
        release()
        raise
    chunks_out = _encoded(first, chunks, response_format, stats)
    return SpeechStream(chunks_out, release, media_type=MEDIA_TYPES[response_format], stats=stats)
