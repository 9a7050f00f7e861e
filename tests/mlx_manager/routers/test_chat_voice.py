"""The playground's voice on the server side: a reply read aloud by the random-weight KittenTTS
(tests/fixtures/tiny_tts_model.py), and the buttons disabled with a hint without such a model."""

from __future__ import annotations

import io
import wave
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from fastapi.testclient import TestClient
from sqlmodel import Session

from mlx_manager.services.chat_voice import VoiceModels, spoken_text
from mlx_server.database import get_engine
from mlx_server.services.speech.synthesis import MAX_INPUT_CHARS
from tests.fixtures.tiny_tts_model import SAMPLE_RATE
from tests.support import csrf_headers, store_exchange

REPLY = "Hello there. This **reply** is read aloud.\n\n```python\nprint('not read')\n```"


@contextmanager
def chat_app(models: dict[str, Path]) -> Iterator[tuple[TestClient, int, int, int]]:
    """The manager app with `models` and a stored exchange whose reply is REPLY."""
    from mlx_manager.main import create_app

    ids = store_exchange(models, REPLY)
    with TestClient(create_app()) as client:
        yield client, *ids


def test_a_reply_is_read_aloud_as_a_wav_and_the_page_offers_it(
    home: Path, tiny_tts_dir: Path, smollm_dir: Path
) -> None:
    with chat_app({"smol": smollm_dir, "tiny-tts": tiny_tts_dir}) as (client, cid, question, reply):
        page = client.get(f"/chat/{cid}").text
        assert f'data-read-aloud="/chat/messages/{reply}/speech.wav"' in page
        assert "Replies are read aloud with tiny-tts" in page
        assert '<option value="tiny-tts"' not in page  # a speech model is not offered for chat
        response = client.get(f"/chat/messages/{reply}/speech.wav")
        assert response.status_code == 200 and response.headers["content-type"] == "audio/wav"
        with wave.open(io.BytesIO(response.content)) as audio:
            assert audio.getframerate() == SAMPLE_RATE and audio.getnframes() > SAMPLE_RATE // 2
        assert client.get(f"/chat/messages/{question}/speech.wav").status_code == 404
        for site in ("cross-site", "same-site"):  # same-site: a page on another port of this host
            elsewhere = {"Sec-Fetch-Site": site, "Sec-Fetch-Dest": "audio"}
            assert client.get(f"/chat/messages/{reply}/speech.wav", headers=elsewhere).status_code == 403
        assert client.get("/chat/messages/999999/speech.wav").status_code == 404


def test_without_a_speech_model_the_buttons_are_disabled_with_a_hint(home: Path, smollm_dir: Path) -> None:
    with chat_app({"smol": smollm_dir}) as (client, cid, _, reply):
        page = client.get(f"/chat/{cid}").text
        assert "No text-to-speech model: replies cannot be read aloud." in page
        assert 'disabled title="No text-to-speech model' in page
        assert 'disabled title="No speech-to-text model' in page
        response = client.get(f"/chat/messages/{reply}/speech.wav")
        assert response.status_code == 409 and "import one on the Models page" in response.text
        recording = {"file": ("recording.wav", b"RIFF", "audio/wav")}
        refused = client.post("/chat/transcribe", files=recording, headers=csrf_headers(client))
        assert refused.status_code == 409 and "import whisper-tiny.en" in refused.text
    with Session(get_engine()) as session:
        assert VoiceModels.of(session) == VoiceModels(speech=None, transcription=None, audio=frozenset())


def test_a_recording_that_is_not_audio_is_refused_before_any_model_loads(
    home: Path, whisper_dir: Path, smollm_dir: Path
) -> None:
    """The real transcription is the browser test's (tests/browser/test_chat_voice_browser.py)."""
    with chat_app({"smol": smollm_dir, "whisper-tiny.en": whisper_dir}) as (client, cid, _, _):
        assert "Dictate with whisper-tiny.en." in client.get(f"/chat/{cid}").text
        not_audio = {"file": ("recording.wav", b"this is text, not audio", "audio/wav")}
        refused = client.post("/chat/transcribe", files=not_audio, headers=csrf_headers(client))
        assert refused.status_code == 400 and "not an audio file" in refused.text
        assert client.get("/v1/admin/pool").json()["models"] == []


def test_spoken_text_leaves_out_code_and_markup_and_stops_at_a_sentence_within_the_limit() -> None:
    assert spoken_text(REPLY) == "Hello there. This reply is read aloud."
    long = "One more sentence. " * (MAX_INPUT_CHARS // 10)
    spoken = spoken_text(long)
    assert len(spoken) <= MAX_INPUT_CHARS and spoken.endswith("sentence.")
