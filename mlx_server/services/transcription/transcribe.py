"""Speech to text (blueprint §4.4 `transcribe_audio`): uploaded audio -> timed segments.

The audio is taken in pieces, each one job on the MLX thread that mlx-audio's Whisper hears in
its own 30 s windows (seeking to the last complete segment, as Whisper does): memory holds one
piece whatever the file's length, and a chat stream interleaves between pieces. A streaming
request takes 30 s pieces, so its client gets each window's text as soon as it is recognised;
other requests take 300 s pieces, since every piece boundary costs one extra window (the
piece's cut last segment is heard again at the start of the next piece, with the text so far
as the prompt), which 30 s pieces would pay every window.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

import mlx.core as mx
import numpy as np

from mlx_server.errors import APIError
from mlx_server.models.detection import ModelType
from mlx_server.models.loaders import ENDPOINTS, LoadedModel, read_spec
from mlx_server.models.pool import get_model_pool
from mlx_server.services.pipeline.generation import admission
from mlx_server.services.transcription.audio_input import SAMPLE_RATE, AudioFile, samples_16k
from mlx_server.utils.metal import stream_on_metal_thread

WINDOW_SECONDS = 30  # Whisper's input; a streaming request's piece
PIECE_SECONDS = 300  # other requests' piece: ~19 MB of samples, ~10 MB of mel spectrogram
MULTILINGUAL_VOCAB = 51865  # Whisper's multilingual vocabularies; the English-only one is 51864
PROMPT_CHARS = 200  # of the text so far, given as the next window's prompt
Task = Literal["transcribe", "translate"]


@dataclass(frozen=True)
class Word:
    word: str
    start: float
    end: float


@dataclass(frozen=True)
class Segment:
    id: int
    start: float
    end: float
    text: str
    avg_logprob: float = 0.0
    compression_ratio: float = 0.0
    no_speech_prob: float = 0.0
    temperature: float = 0.0
    words: tuple[Word, ...] = ()


@dataclass
class TranscriptionOptions:
    task: Task = "transcribe"
    language: str | None = None
    prompt: str | None = None
    temperature: float | None = None  # None: Whisper's fallback ladder 0.0, 0.2, ... 1.0
    words: bool = False
    piece_seconds: int = PIECE_SECONDS


@dataclass
class Transcript:
    """What the request heard; filled in as the windows are recognised."""

    language: str  # "" until detected
    duration: float
    segments: list[Segment] = field(default_factory=list)

    @property
    def text(self) -> str:
        return "".join(s.text for s in self.segments).strip()


def check_request(model_id: str, options: TranscriptionOptions) -> str:
    """The language to transcribe in ("" to detect it); a 4xx for a model that is not a
    registered Whisper model or cannot do what `options` ask, before anything loads."""
    spec = read_spec(model_id)
    if spec.model_type is not ModelType.SPEECH_TO_TEXT:
        raise APIError(
            400,
            f"Model {model_id!r} is of type {spec.model_type}; use {ENDPOINTS[spec.model_type]} with it "
            "(this endpoint serves speech-to-text models).",
            param="model",
            code="wrong_model_type",
        )
    if spec.config.get("model_type") != "whisper":
        raise APIError(
            400,
            f"{model_id!r} is a {spec.config.get('model_type')} speech model; this server transcribes "
            "with Whisper models.",
            param="model",
            code="model_type_unsupported",
        )
    multilingual = int(spec.config.get("n_vocab", 0)) >= MULTILINGUAL_VOCAB
    if options.task == "translate" and not multilingual:
        raise APIError(
            400,
            f"{model_id!r} is an English-only model and cannot translate; use a multilingual Whisper "
            "model with /v1/audio/translations, or /v1/audio/transcriptions for English audio.",
            param="model",
            code="translation_unsupported",
        )
    language = (options.language or "").strip().lower()
    if not multilingual:
        if language not in ("", "en", "english"):
            raise APIError(
                400,
                f"{model_id!r} transcribes English only; leave out language or send 'en'.",
                param="language",
            )
        return "en"
    from mlx_audio.stt.models.whisper.tokenizer import LANGUAGES, TO_LANGUAGE_CODE

    code = str(TO_LANGUAGE_CODE.get(language, language))
    if code and code not in LANGUAGES:
        raise APIError(
            400, f"language {language!r} is not an ISO-639-1 code Whisper knows.", param="language"
        )
    return code


def _segments(result: Any, offset: float, first_id: int, limit: float) -> list[Segment]:
    out = []
    for i, raw in enumerate(result.segments or []):
        words = tuple(
            Word(w["word"], round(offset + w["start"], 3), round(min(offset + w["end"], limit), 3))
            for w in raw.get("words") or []
        )
        out.append(
            Segment(
                id=first_id + i,
                start=round(offset + float(raw["start"]), 3),
                end=round(min(offset + float(raw["end"]), limit), 3),
                text=str(raw["text"]),
                avg_logprob=float(raw.get("avg_logprob", 0.0)),
                compression_ratio=float(raw.get("compression_ratio", 0.0)),
                no_speech_prob=float(raw.get("no_speech_prob", 0.0)),
                temperature=float(raw.get("temperature", 0.0)),
                words=words,
            )
        )
    return out


def hear_window(
    loaded: LoadedModel,
    window: np.ndarray[Any, np.dtype[np.float32]],
    options: TranscriptionOptions,
    language: str = "",
    prompt: str | None = None,
) -> Any:
    """A piece of 16 kHz audio through mlx-audio's Whisper (on the MLX thread), which hears it
    in 30 s windows: its result (text, segments relative to the piece, language)."""
    model = loaded.model
    temperature: float | tuple[float, ...] = (
        options.temperature if options.temperature is not None else (0.0, 0.2, 0.4, 0.6, 0.8, 1.0)
    )
    return model.generate(
        mx.array(window),
        language=language or None,
        task=options.task,
        temperature=temperature,
        initial_prompt=prompt or None,
        word_timestamps=options.words,
        fp16=getattr(model, "dtype", mx.float16) == mx.float16,
    )


def recognise(
    loaded: LoadedModel, audio: AudioFile, options: TranscriptionOptions, transcript: Transcript
) -> Iterator[list[Segment]]:
    """The segments of each piece in order (each `next` is one piece's work)."""
    window_samples = options.piece_seconds * SAMPLE_RATE
    pending = np.empty(0, dtype=np.float32)
    offset = 0.0  # seconds of audio before pending[0]
    blocks = samples_16k(audio)
    exhausted = False
    while not exhausted or len(pending):
        parts, size = [pending], len(pending)
        while size < window_samples and not exhausted:
            block = next(blocks, None)
            exhausted = block is None
            if block is not None:
                parts.append(block)
                size += len(block)
        pending = np.concatenate(parts)
        window, pending = pending[:window_samples], pending[window_samples:]
        last = exhausted and not len(pending)
        prompt = " ".join(filter(None, [options.prompt, transcript.text[-PROMPT_CHARS:]])) or None
        result = hear_window(loaded, window, options, transcript.language, prompt)
        transcript.language = transcript.language or str(result.language or "")
        heard = _segments(result, offset, len(transcript.segments), transcript.duration)
        keep = round((heard[-1].start - offset) * SAMPLE_RATE) if heard else 0
        if not last and len(heard) > 1 and keep > 0:  # hear the possibly cut last segment again
            pending = np.concatenate([window[keep:], pending])
            offset, heard = heard[-1].start, heard[:-1]
        else:
            offset += len(window) / SAMPLE_RATE
        transcript.segments.extend(heard)
        yield heard


async def transcribe_audio(
    model_id: str, audio: AudioFile, options: TranscriptionOptions, transcript: Transcript
) -> AsyncIterator[list[Segment]]:
    """Each window's segments as it is recognised, added to `transcript` too. The model is leased
    when the first window is asked for and released when the stream ends or is dropped;
    `check_request` has already refused what cannot work."""
    admission.acquire()
    try:
        async with get_model_pool().lease(model_id, ModelType.SPEECH_TO_TEXT) as loaded:
            async for heard in stream_on_metal_thread(lambda: recognise(loaded, audio, options, transcript)):
                yield heard
    finally:
        admission.release()
