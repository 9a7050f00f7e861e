"""Uploads that would make /v1/audio/transcriptions work for hours, refused before anything is
heard, and a client that leaves taking its transcription with it (issue #31's audio attacks:
a 916 KB FLAC that decodes to 10 hours, its first 20 KB, a WAV at 1 Hz, a client gone at 120 s
while the server went on and answered 500)."""

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
from mlx_server.utils.metal import get_metal_thread
from tests.fixtures.speech_clips import MINUTE, speak
from tests.mlx_server.api.conftest import register_models, standalone_server

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


def _ten_minutes_of_speech(tmp_path: Path) -> Path:
    """espeak-ng's minute of speech ten times over, as 16 kHz WAV (twenty Whisper windows)."""
    minute, rate = sf.read(speak(MINUTE, tmp_path / "minute.wav"), dtype="float32")
    target = tmp_path / "ten-minutes.wav"
    sf.write(target, np.tile(minute, 10), rate, subtype="PCM_16")
    return target


def _quiet_after(left_at: float, timeout: float = 300) -> float:
    """Seconds from `left_at` until the MLX thread stopped working (idle for half a second)."""
    thread = get_metal_thread()
    busy, changed = thread.busy_seconds(), time.monotonic()
    while time.monotonic() - left_at < timeout:
        time.sleep(0.05)
        if (now := thread.busy_seconds()) != busy:
            busy, changed = now, time.monotonic()
        elif time.monotonic() - changed >= 0.5:
            return changed - left_at
    raise AssertionError("the transcription went on after its client left")


def test_a_client_that_leaves_stops_its_transcription_streamed_or_whole(
    live_server: str, whisper_dir: Path, tmp_path: Path
) -> None:
    register_models({MODEL: whisper_dir})
    clip = _ten_minutes_of_speech(tmp_path)
    url = f"{live_server}/v1/audio/transcriptions"
    started = time.monotonic()
    with (
        clip.open("rb") as audio,
        httpx.stream(
            "POST", url, data={"model": MODEL, "stream": "true"}, files={"file": audio}, timeout=300
        ) as r,
    ):
        assert r.status_code == 200
        next(line for line in r.iter_lines() if "transcript.text.delta" in line)
        window = time.monotonic() - started  # the model's load and the first window
    streamed = _quiet_after(time.monotonic())

    with clip.open("rb") as audio, pytest.raises(httpx.ReadTimeout):
        httpx.post(url, data={"model": MODEL}, files={"file": audio}, timeout=httpx.Timeout(30, read=1.0))
    whole = _quiet_after(time.monotonic())
    # Each stopped within the window under way; hearing all twenty takes ~20 windows.
    assert streamed < 3 * window and whole < 3 * window, (window, streamed, whole)
    deadline = time.monotonic() + 10
    while (statuses := _audit_statuses()) != [499, 499] and time.monotonic() < deadline:
        time.sleep(0.1)
    assert statuses == [499, 499]
