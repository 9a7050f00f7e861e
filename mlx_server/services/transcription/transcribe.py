"""Speech to text (blueprint §4.4 `transcribe_audio`): uploaded audio -> timed segments.

The audio is heard in Whisper's 30 s windows (`whisper_windows.py`: Whisper's own loop, with
its seek, prompt and fallbacks, stepped by us), each window one job on the MLX thread, decoded
and resampled a block at a time: memory holds one window whatever the file's length, a
streaming request's client gets each window's text as soon as it is heard, and the stream is
a fair one (`MetalThread.stream(fair=True)`): after each window, other work waiting for the
thread (a chat) gets as long as that window took before the next one starts, so a long file
holds a chat back by at most one window.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Iterator
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from mlx_server.errors import APIError
from mlx_server.models.detection import ModelType
from mlx_server.models.loaders import ENDPOINTS, LoadedModel, read_spec
from mlx_server.models.pool import get_model_pool
from mlx_server.services.operations.model_defaults import current_defaults
from mlx_server.services.pipeline.engine.generation import admission
from mlx_server.services.transcription.audio_input import AudioFile, samples_16k
from mlx_server.services.transcription.whisper_windows import SampleReader, Samples, WhisperWindows
from mlx_server.utils.metal import stream_on_metal_thread

MULTILINGUAL_VOCAB = 51865  # Whisper's multilingual vocabularies; the English-only one is 51864
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
    beam_size: int | None = None  # None: the model's default, else 1 (greedy)
    patience: float = 1.0  # beam search ends once round(beam_size * patience) texts are finished


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


def _segment(raw: dict[str, Any], id_: int, limit: float) -> Segment:
    words = tuple(
        Word(w["word"], round(w["start"], 3), round(min(w["end"], limit), 3)) for w in raw.get("words") or []
    )
    return Segment(
        id=id_,
        start=round(float(raw["start"]), 3),
        end=round(min(float(raw["end"]), limit), 3),
        text=str(raw["text"]),
        avg_logprob=float(raw.get("avg_logprob", 0.0)),
        compression_ratio=float(raw.get("compression_ratio", 0.0)),
        no_speech_prob=float(raw.get("no_speech_prob", 0.0)),
        temperature=float(raw.get("temperature", 0.0)),
        words=words,
    )


def _windows(
    loaded: LoadedModel, samples: Iterator[Samples], options: TranscriptionOptions, language: str
) -> WhisperWindows:
    return WhisperWindows(
        loaded.model,
        SampleReader(samples),
        task=options.task,
        language=language,
        temperature=options.temperature,
        prompt=options.prompt,
        words=options.words,
        beam_size=options.beam_size or 1,
        patience=options.patience,
    )


def recognise(
    loaded: LoadedModel, audio: AudioFile, options: TranscriptionOptions, transcript: Transcript
) -> Iterator[list[Segment]]:
    """The segments of each window in order (each `next` is one window's work; a silent
    window's list is empty)."""
    whisper = _windows(loaded, samples_16k(audio), options, transcript.language)
    while (heard := whisper.next_window()) is not None:
        transcript.language = whisper.language
        first = len(transcript.segments)
        segments = [_segment(raw, first + i, transcript.duration) for i, raw in enumerate(heard)]
        transcript.segments.extend(segments)
        yield segments


def hear_clip(loaded: LoadedModel, samples: Samples, options: TranscriptionOptions) -> str:
    """A short clip of 16 kHz samples heard whole (on the MLX thread): its text."""
    whisper = _windows(loaded, iter([samples]), options, "")
    texts = []
    while (heard := whisper.next_window()) is not None:
        texts += [segment["text"] for segment in heard]
    return "".join(texts).strip()


async def transcribe_audio(
    model_id: str, audio: AudioFile, options: TranscriptionOptions, transcript: Transcript
) -> AsyncGenerator[list[Segment], None]:
    """Each window's segments as it is recognised, added to `transcript` too. The model is leased
    when the first window is asked for and released when the stream ends or is dropped;
    `check_request` has already refused what cannot work. A request without `beam_size` takes
    the model's default (models/defaults.py)."""
    admission.acquire()
    try:
        async with get_model_pool().lease(model_id, ModelType.SPEECH_TO_TEXT) as loaded:
            if options.beam_size is None:
                options = replace(options, beam_size=current_defaults(loaded).beam_size)
            windows = stream_on_metal_thread(lambda: recognise(loaded, audio, options, transcript), fair=True)
            async for heard in windows:
                yield heard
    finally:
        admission.release()
