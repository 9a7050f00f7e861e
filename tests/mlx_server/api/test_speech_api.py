"""POST /v1/audio/speech through the real openai SDK, with a random-weight KittenTTS model
(tests/fixtures/tiny_tts_model.py): espeak-ng phonemes, the model and its vocoder run for real;
the voice is noise, so the checks are on the files, the stream and the errors."""

from __future__ import annotations

import io
import struct
import time
import wave
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import miniaudio
import numpy as np
import openai
import pytest
from fastapi.testclient import TestClient
from sqlmodel import Session, select

from mlx_server.database import get_engine
from mlx_server.records import AuditLog
from mlx_server.services.operations.audit import audit_service
from tests.fixtures.tiny_tts_model import SAMPLE_RATE
from tests.mlx_server.api.conftest import register_models, standalone_server

MODEL = "tiny-tts"
SENTENCE = "The quick brown fox jumps over the lazy dog."


@pytest.fixture
def server(home: Path, tiny_tts_dir: Path) -> Iterator[TestClient]:
    with standalone_server({MODEL: tiny_tts_dir}) as client:
        yield client


@pytest.fixture
def sdk(server: TestClient) -> openai.OpenAI:
    return openai.OpenAI(base_url="http://testserver/v1", api_key="x", http_client=server, max_retries=0)


def _wav_samples(data: bytes) -> tuple[int, np.ndarray]:
    with wave.open(io.BytesIO(data)) as reader:
        assert (reader.getnchannels(), reader.getsampwidth()) == (1, 2)
        frames = reader.readframes(reader.getnframes())
        return reader.getframerate(), np.frombuffer(frames, dtype="<i2")


def _decoded_seconds(data: bytes, info: Callable[[bytes], miniaudio.SoundFileInfo]) -> float:
    """The file's length as a decoder that reads to the end of the stream finds it."""
    assert info(data).sample_rate == SAMPLE_RATE
    decoded = miniaudio.decode(
        data, output_format=miniaudio.SampleFormat.FLOAT32, nchannels=1, sample_rate=SAMPLE_RATE
    )
    samples = np.asarray(decoded.samples)
    assert np.sqrt(np.mean(samples**2)) > 1e-3, "the decoded audio is silent"
    return float(decoded.num_frames / decoded.sample_rate)


def test_sdk_speech_is_a_wav_with_its_declared_rate_and_sound_and_an_audit_row(
    sdk: openai.OpenAI,
) -> None:
    response = sdk.audio.speech.create(model=MODEL, input=SENTENCE, voice="alloy", response_format="wav")
    data = response.content
    assert data[:4] == b"RIFF" and data[8:12] == b"WAVE"
    assert response.response.headers["content-type"] == "audio/wav"
    rate, samples = _wav_samples(data)
    assert rate == SAMPLE_RATE == int(response.response.headers["x-sample-rate"])
    assert struct.unpack("<I", data[24:28])[0] == SAMPLE_RATE  # the fmt chunk's own field
    assert len(samples) > SAMPLE_RATE // 2  # a sentence is more than half a second
    assert np.sqrt(np.mean(samples.astype(np.float64) ** 2)) > 100  # not silence (int16 units)
    audit_service.flush()
    with Session(get_engine()) as session:
        row = session.exec(select(AuditLog).where(AuditLog.endpoint == "POST /v1/audio/speech")).one()
    assert row.status == 200 and row.model == MODEL
    assert row.audio_seconds == pytest.approx(len(samples) / rate, abs=0.001)
    assert row.parameters == {"voice": "alloy", "response_format": "wav", "input_chars": len(SENTENCE)}
    assert row.ttft_ms is not None and row.ttft_ms <= row.latency_ms


def test_flac_mp3_opus_and_pcm_are_whole_files_and_speed_changes_the_length(sdk: openai.OpenAI) -> None:
    def speak(response_format: str, speed: float = 1.0) -> bytes:
        return sdk.audio.speech.create(
            model=MODEL, input=SENTENCE, voice="echo", response_format=response_format, speed=speed
        ).content

    # Each call's length differs a little: KittenTTS trims a noisy tail, and this model is noise.
    flac = speak("flac")
    assert flac[:4] == b"fLaC"
    assert _decoded_seconds(flac, miniaudio.flac_get_info) > 1.0
    mp3 = speak("mp3")
    assert mp3[0] == 0xFF and mp3[1] & 0xE0 == 0xE0  # an MPEG frame sync
    assert _decoded_seconds(mp3, miniaudio.mp3_get_info) > 1.0
    opus = speak("opus")
    assert opus[:4] == b"OggS" and b"OpusHead" in opus[:64]
    slow, fast = speak("pcm", speed=0.5), speak("pcm", speed=4.0)
    assert len(slow) % 2 == 0 and len(fast) * 2 < len(slow)


# A change to a good request, and what the 4xx must say.
BAD_REQUESTS: list[tuple[dict[str, object], int, str, str]] = [
    ({"voice": "nova"}, 400, "voice", "its voices are: alloy, echo"),
    ({"input": ""}, 400, "input", "input is empty"),
    ({"input": "   \n"}, 400, "input", "input is empty"),
    ({"input": "a" * 4097}, 400, "input", "at most 4096"),
    ({"speed": 5.0}, 400, "speed", "less than or equal to 4"),
    ({"response_format": "aac"}, 400, "response_format", "Use one of wav, pcm"),
    ({"response_format": "ogg"}, 400, "response_format", "'mp3'"),
    ({"model": "no-such-model"}, 404, "model", "GET /v1/models"),
]


def test_bad_requests_are_clear_4xx_and_the_server_stays_healthy(server: TestClient) -> None:
    for change, status, param, says in BAD_REQUESTS:
        response = server.post(
            "/v1/audio/speech", json={"model": MODEL, "input": "Hi.", "voice": "alloy", **change}
        )
        assert response.status_code == status, (change, response.text)
        error = response.json()["error"]
        assert error["param"] == param and says in error["message"], (change, error)
    assert server.get("/health").status_code == 200
    ok = server.post("/v1/audio/speech", json={"model": MODEL, "input": "Hi.", "voice": "echo"})
    assert ok.status_code == 200 and ok.content


def _active_requests(url: str) -> int:
    pool = httpx.get(f"{url}/v1/admin/pool").json()
    return sum(m["active_requests"] for m in pool["models"] if m["id"] == MODEL)


def test_streaming_response_yields_audio_before_the_whole_file_is_made(
    home: Path, tiny_tts_dir: Path, live_server: str
) -> None:
    register_models({MODEL: tiny_tts_dir})
    client = openai.OpenAI(base_url=f"{live_server}/v1", api_key="x", max_retries=0, timeout=60)
    # Past KittenTTS's 400-character chunk, each sentence is spoken (and sent) on its own.
    text = " ".join(f"Sentence {n} is one of several that make this text long enough." for n in range(7))
    # Loaded first: the timing below is the speaking, not the model's load (slow on a busy machine).
    client.audio.speech.create(model=MODEL, input="Hi.", voice="alloy", response_format="pcm")
    arrivals: list[tuple[float, int]] = []
    leases: list[int] = []
    started = time.perf_counter()
    with client.audio.speech.with_streaming_response.create(
        model=MODEL, input=text, voice="alloy", response_format="pcm", speed=4.0
    ) as response:
        for chunk in response.iter_bytes(chunk_size=None):
            arrivals.append((time.perf_counter() - started, len(chunk)))
            if len(arrivals) == 1:
                leases.append(_active_requests(live_server))
    leases.append(_active_requests(live_server))
    assert leases == [1, 0]  # the model is leased while it speaks, and given back at the end
    total = arrivals[-1][0]
    assert arrivals[0][1] > 0
    assert len(arrivals) >= 4, arrivals
    # The first audio came while most of the text was still to be spoken.
    assert arrivals[0][0] < total / 2, arrivals
    assert httpx.get(f"{live_server}/health").status_code == 200
