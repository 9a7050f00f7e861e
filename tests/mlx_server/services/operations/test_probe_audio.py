"""Probing audio models: the real whisper tiny.en (speech to text) and the random-weight
KittenTTS fixture (text to speech) record their kind; the models page shows it as a badge."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlmodel import Session

from mlx_server.database import get_engine, upgrade_database
from mlx_server.models.pool import get_model_pool, reset_model_pool
from mlx_server.records import ModelCapabilities, ModelRecord, ModelSource
from mlx_server.services.operations.probe import probe_model
from mlx_server.services.operations.probe_audio import AUDIO_STEP_NAMES
from mlx_server.services.operations.probe_steps import ProbeStep
from mlx_server.utils.metal import reset_metal_thread


@pytest.fixture
def audio_models(home: Path, whisper_dir: Path, tiny_tts_dir: Path) -> Iterator[None]:
    upgrade_database()
    with Session(get_engine()) as session:
        session.add(ModelRecord(id="whisper", source=ModelSource.LOCAL, path=str(whisper_dir)))
        session.add(ModelRecord(id="kitten", source=ModelSource.LOCAL, path=str(tiny_tts_dir)))
        session.commit()
    yield
    reset_model_pool()
    reset_metal_thread()


def _probe(model_id: str) -> tuple[ModelCapabilities, dict[str, ProbeStep]]:
    steps: list[ProbeStep] = []
    capabilities = asyncio.run(probe_model(model_id, on_step=steps.append))
    assert [s.name for s in steps if s.status == "running"] == list(AUDIO_STEP_NAMES)
    return capabilities, {s.name: s for s in steps if s.status != "running"}


def test_the_probe_records_speech_to_text_and_text_to_speech_and_the_page_shows_them(
    audio_models: None, client: TestClient
) -> None:
    whisper, steps = _probe("whisper")
    assert steps["detect"].detail == "type stt, family whisper"
    assert steps["check"].detail.startswith("speech to text: heard 2 s of silence in ")
    assert (whisper.model_type, whisper.model_family, whisper.supports_stt, whisper.supports_tts) == (
        "stt",
        "whisper",
        True,
        False,
    )
    kitten, steps = _probe("kitten")
    assert steps["check"].detail.startswith("text to speech")
    assert (kitten.model_type, kitten.supports_stt, kitten.supports_tts) == ("tts", False, True)
    assert steps["unload"].detail == "unloaded" and get_model_pool().status()["models"] == []
    page = client.get("/models").text
    assert '<span class="badge cap-speech-to-text">speech-to-text</span>' in page
    assert '<span class="badge cap-text-to-speech">text-to-speech</span>' in page
