"""Uploads that would make /v1/audio/transcriptions work for hours, refused before anything is
heard (issue #31's audio attacks: a 916 KB FLAC that decodes to 10 hours, its first 20 KB, a
WAV at 1 Hz)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest
import soundfile as sf
from fastapi.testclient import TestClient
from sqlmodel import Session, select

from mlx_server.database import get_engine
from mlx_server.models.pool import get_model_pool
from mlx_server.records import AuditLog
from mlx_server.services.operations.audit import audit_service
from tests.mlx_server.api.conftest import standalone_server

MODEL = "whisper-tiny.en"
ENDPOINT = "POST /v1/audio/transcriptions"


@pytest.fixture(scope="module")
def ten_hours(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Ten hours of 8 kHz silence as FLAC: ~916 KB that decode to 288 million samples."""
    path = tmp_path_factory.mktemp("flac") / "ten-hours.flac"
    hour = np.zeros(8000 * 3600, dtype=np.int16)
    with sf.SoundFile(path, "w", samplerate=8000, channels=1, format="FLAC", subtype="PCM_16") as flac:
        for _ in range(10):
            flac.write(hour)
    return path


@pytest.fixture
def server(home: Path, whisper_dir: Path) -> Iterator[TestClient]:
    with standalone_server({MODEL: whisper_dir}) as client:
        yield client


def _post(server: TestClient, name: str, content: bytes) -> httpx.Response:
    return server.post("/v1/audio/transcriptions", data={"model": MODEL}, files={"file": (name, content)})


def _refusal(response: httpx.Response, code: str = "invalid_audio") -> str:
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["code"] == code and error["param"] == "file", error
    message: str = error["message"]
    return message


def _audit_statuses() -> list[int]:
    assert audit_service.flush()
    with Session(get_engine()) as session:
        return [row.status for row in session.exec(select(AuditLog).where(AuditLog.endpoint == ENDPOINT))]


def test_a_10_hour_flac_and_its_first_20_kb_are_refused_before_anything_is_heard(
    server: TestClient, ten_hours: Path, tmp_path: Path, fox_clip: Path
) -> None:
    data = ten_hours.read_bytes()
    assert len(data) < 1_000_000
    started = time.monotonic()
    whole = _refusal(_post(server, "ten-hours.flac", data), "audio_too_long")
    assert (
        "10:00:00 (36000 s)" in whole
        and "2:00:00 (7200 s)" in whole
        and "MLX_SERVER_MAX_AUDIO_SECONDS" in whole
    )
    _refusal(_post(server, "first-20-kb.flac", data[:20_000]), "audio_too_long")  # its header still says 10 h
    samples, rate = sf.read(fox_clip, dtype="float32")
    sf.write(tmp_path / "fox.flac", samples, rate, format="FLAC")
    fox = (tmp_path / "fox.flac").read_bytes()
    assert "truncated FLAC" in _refusal(_post(server, "cut.flac", fox[: len(fox) // 2]))
    assert time.monotonic() - started < 10  # no window was heard: one takes seconds
    assert get_model_pool().get_loaded(MODEL) is None  # nor was the model loaded
    assert _audit_statuses() == [400, 400, 400]


@pytest.mark.parametrize(("rate", "kind"), [(1, "WAV"), (500_000, "FLAC")])
def test_absurd_sample_rates_are_400s_naming_the_rate(
    server: TestClient, tmp_path: Path, rate: int, kind: str
) -> None:
    """A 100 KB WAV at 1 Hz says it lasts 14 hours, and resampling it built a filter of two
    million taps per block; 500 kHz is beyond any recorder."""
    path = tmp_path / f"{rate}.{kind.lower()}"
    sf.write(path, np.zeros(50_000, dtype=np.int16), rate, format=kind, subtype="PCM_16")
    message = _refusal(_post(server, path.name, path.read_bytes()))
    assert f"sample rate of {rate} Hz" in message and "4000 Hz to 384000 Hz" in message
