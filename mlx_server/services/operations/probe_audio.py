"""The probe of an audio model: speech to text or text to speech, recorded with its kind.

A speech-to-text model is checked by hearing two seconds of silence through the same windows
as /v1/audio/transcriptions (it must run and return text, usually none); a text-to-speech
model by loading it and reading its sample rate. Both store model_type (stt or tts) and the
supports_stt / supports_tts flags the models page shows as badges.
"""

from __future__ import annotations

import time

import numpy as np
from sqlmodel import Session

from mlx_server.models.detection import ModelType
from mlx_server.models.loaders import LoadedModel
from mlx_server.models.store import save_capabilities
from mlx_server.records import ModelCapabilities
from mlx_server.services.operations.probe_steps import ProbeSteps, pool_lease, run_probe
from mlx_server.services.transcription.transcribe import TranscriptionOptions, hear_clip
from mlx_server.utils.metal import run_on_metal_thread

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
    model_id: str, model_type: ModelType, family: str, steps: ProbeSteps
) -> ModelCapabilities:
    """Steps "load", "check", "save", "unload" of probe_model() for an STT or a TTS model."""

    async def check(loaded: LoadedModel) -> None:
        with steps.step("check") as outcome:
            outcome.detail = await _check(loaded, model_type)

    def save(session: Session, loaded: LoadedModel, _: None) -> ModelCapabilities:
        return save_capabilities(
            session,
            model_id,
            model_type=str(model_type),
            model_family=family,
            supports_stt=model_type is ModelType.SPEECH_TO_TEXT,
            supports_tts=model_type is ModelType.TEXT_TO_SPEECH,
        )

    return await run_probe(model_id, steps, lease=pool_lease(model_id, model_type), check=check, save=save)
