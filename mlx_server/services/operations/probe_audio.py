"""The probe of an audio model: speech to text or text to speech, recorded with its kind.

A speech-to-text model is checked by hearing two seconds of silence through the same windows
as /v1/audio/transcriptions (it must run and return text, usually none); a text-to-speech
model by loading it and reading its sample rate. Both store model_type (stt or tts) and the
supports_stt / supports_tts flags the models page shows as badges.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

import numpy as np
from sqlmodel import Session

from mlx_server.database import get_engine
from mlx_server.models.detection import ModelType
from mlx_server.models.loaders import LoadedModel
from mlx_server.models.pool import ModelPoolManager, get_model_pool
from mlx_server.models.store import save_capabilities
from mlx_server.records import ModelCapabilities
from mlx_server.services.transcription.transcribe import TranscriptionOptions, hear_clip
from mlx_server.utils.metal import run_on_metal_thread

if TYPE_CHECKING:
    from mlx_server.services.operations.probe import _Steps

    Unload = Callable[
        [ModelPoolManager, LoadedModel, bool, ModelCapabilities | None, _Steps], Awaitable[None]
    ]

AUDIO_STEP_NAMES = ("detect", "load", "check", "save", "unload")
SILENCE_SECONDS = 2


async def _check(loaded: LoadedModel, model_type: ModelType) -> str:
    if model_type is ModelType.TEXT_TO_SPEECH:
        rate = loaded.speech.sample_rate if loaded.speech is not None else None
        return f"text to speech, {rate} Hz" if rate else "text to speech"
    silence = np.zeros(SILENCE_SECONDS * 16000, dtype=np.float32)
    started = time.perf_counter()
    greedy = TranscriptionOptions(temperature=0.0)  # no fallback ladder: silence is unlikely text
    text = await run_on_metal_thread(lambda: hear_clip(loaded, silence, greedy))
    elapsed = time.perf_counter() - started
    return f"speech to text: heard {SILENCE_SECONDS} s of silence in {elapsed:.1f} s as {text!r}"


async def probe_audio_model(
    model_id: str, model_type: ModelType, family: str, steps: _Steps, unload: Unload
) -> ModelCapabilities:
    """Steps "load", "check", "save", "unload" of probe_model() for an STT or a TTS model."""
    pool = get_model_pool()
    was_loaded = pool.get_loaded(model_id) is not None
    with steps.step("load") as outcome:
        loaded = await pool.acquire(model_id, model_type)
        outcome.detail = "already loaded" if was_loaded else "loaded"
    try:
        with steps.step("check") as outcome:
            outcome.detail = await _check(loaded, model_type)
    except BaseException:
        pool.release(loaded)
        await unload(pool, loaded, was_loaded, None, steps)
        raise
    pool.release(loaded)
    with steps.step("save") as outcome, Session(get_engine()) as session:
        capabilities = save_capabilities(
            session,
            model_id,
            model_type=str(model_type),
            model_family=family,
            supports_stt=model_type is ModelType.SPEECH_TO_TEXT,
            supports_tts=model_type is ModelType.TEXT_TO_SPEECH,
        )
        outcome.detail = f"ModelCapabilities of {model_id!r} stored"
    await unload(pool, loaded, was_loaded, capabilities, steps)
    return capabilities
