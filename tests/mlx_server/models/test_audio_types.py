"""Speech-to-text and text-to-speech are two model types, each sent to its own endpoint."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from sqlmodel import Session

from mlx_server.database import get_engine, upgrade_database
from mlx_server.errors import APIError
from mlx_server.models.detection import ModelType, detect_model_type
from mlx_server.models.pool import ModelPoolManager, reset_model_pool
from mlx_server.records import ModelRecord, ModelSource


def _model_dir(root: Path, config: dict[str, object]) -> Path:
    root.mkdir()
    (root / "config.json").write_text(json.dumps(config))
    return root


@pytest.mark.parametrize(
    ("config", "expected"),
    [
        ({"model_type": "whisper"}, ModelType.SPEECH_TO_TEXT),
        ({"architectures": ["WhisperForConditionalGeneration"]}, ModelType.SPEECH_TO_TEXT),
        ({"model_type": "parakeet_tdt"}, ModelType.SPEECH_TO_TEXT),
        ({"architectures": ["Wav2Vec2ForCTC"]}, ModelType.SPEECH_TO_TEXT),
        ({"model_type": "kokoro"}, ModelType.TEXT_TO_SPEECH),
        ({"model_type": "csm"}, ModelType.TEXT_TO_SPEECH),
        # mlx-audio also has TTS models named llama and qwen3: those names stay text models.
        ({"model_type": "llama", "architectures": ["LlamaForCausalLM"]}, ModelType.TEXT_GEN),
        ({"model_type": "qwen3"}, ModelType.TEXT_GEN),
    ],
)
def test_audio_models_are_detected_as_speech_to_text_or_text_to_speech(
    tmp_path: Path, config: dict[str, object], expected: ModelType
) -> None:
    assert detect_model_type(_model_dir(tmp_path / "m", config)) is expected


@pytest.mark.parametrize(
    ("config", "served_by", "wanted"),
    [
        ({"model_type": "whisper"}, "/v1/audio/transcriptions", ModelType.TEXT_TO_SPEECH),
        ({"model_type": "kokoro"}, "/v1/audio/speech", ModelType.SPEECH_TO_TEXT),
        ({"model_type": "kokoro"}, "/v1/audio/speech", ModelType.TEXT_GEN),
    ],
)
def test_an_audio_model_at_the_wrong_endpoint_is_a_400_naming_the_right_one(
    home: Path, config: dict[str, object], served_by: str, wanted: ModelType
) -> None:
    upgrade_database()
    path = _model_dir(home / "audio-model", config)
    with Session(get_engine()) as session:
        session.add(ModelRecord(id="audio-model", source=ModelSource.LOCAL, path=str(path)))
        session.commit()
    pool = ModelPoolManager(budget_bytes=1 << 30, max_models=2, idle_ttl_seconds=0)
    try:
        with pytest.raises(APIError, match=f"use {served_by} with it") as caught:
            asyncio.run(pool.acquire("audio-model", wanted))
    finally:
        reset_model_pool()
    assert caught.value.status == 400 and caught.value.code == "wrong_model_type"
    assert pool.load_count == 0
