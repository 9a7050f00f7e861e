"""The playground's voice on the server side: a reply read aloud by the random-weight KittenTTS
(tests/fixtures/tiny_tts_model.py), and the buttons disabled with a hint without such a model."""

from __future__ import annotations

import io
import wave
from pathlib import Path

from fastapi.testclient import TestClient
from sqlmodel import Session

from mlx_manager.records import ConversationMessage
from mlx_manager.services.chat_voice import VoiceModels, spoken_text
from mlx_manager.services.conversations import add_message, create_conversation
from mlx_server.database import get_engine, upgrade_database
from mlx_server.records import ModelRecord, ModelSource
from mlx_server.services.speech.synthesis import MAX_INPUT_CHARS
from tests.fixtures.tiny_tts_model import SAMPLE_RATE

REPLY = "Hello there. This **reply** is read aloud.\n\n```python\nprint('not read')\n```"


def _conversation(*, with_speech: bool, tiny_tts_dir: Path, smollm_dir: Path) -> tuple[int, int, int]:
    """A chat model (listed, never loaded), maybe the speech model, and a stored exchange."""
    upgrade_database()
    with Session(get_engine()) as session:
        session.add(ModelRecord(id="smol", source=ModelSource.LOCAL, path=str(smollm_dir)))
        if with_speech:
            session.add(ModelRecord(id="tiny-tts", source=ModelSource.LOCAL, path=str(tiny_tts_dir)))
        session.commit()
        conversation = create_conversation(session, model_id="smol")
        question = add_message(session, conversation, "user", "Say hello.")
        reply = add_message(session, conversation, "assistant", REPLY)
        session.commit()
        assert conversation.id and question.id and reply.id
        return conversation.id, question.id, reply.id


def test_a_reply_is_read_aloud_as_a_wav_and_the_page_offers_it(
    home: Path, tiny_tts_dir: Path, smollm_dir: Path
) -> None:
    from mlx_manager.main import create_app

    cid, question, reply = _conversation(with_speech=True, tiny_tts_dir=tiny_tts_dir, smollm_dir=smollm_dir)
    with TestClient(create_app()) as client:
        page = client.get(f"/chat/{cid}").text
        assert f'data-read-aloud="/chat/messages/{reply}/speech.wav"' in page
        assert "Replies are read aloud with tiny-tts" in page
        assert '<option value="tiny-tts"' not in page  # a speech model is not offered for chat
        response = client.get(f"/chat/messages/{reply}/speech.wav")
        assert response.status_code == 200 and response.headers["content-type"] == "audio/wav"
        with wave.open(io.BytesIO(response.content)) as audio:
            assert audio.getframerate() == SAMPLE_RATE and audio.getnframes() > SAMPLE_RATE // 2
        assert client.get(f"/chat/messages/{question}/speech.wav").status_code == 404
        assert client.get("/chat/messages/999999/speech.wav").status_code == 404


def test_without_a_speech_model_the_buttons_are_disabled_with_a_hint(
    home: Path, tiny_tts_dir: Path, smollm_dir: Path
) -> None:
    from mlx_manager.main import create_app

    cid, _, reply = _conversation(with_speech=False, tiny_tts_dir=tiny_tts_dir, smollm_dir=smollm_dir)
    with TestClient(create_app()) as client:
        page = client.get(f"/chat/{cid}").text
        assert "No text-to-speech model: replies cannot be read aloud." in page
        assert 'disabled title="No text-to-speech model' in page
        response = client.get(f"/chat/messages/{reply}/speech.wav")
        assert response.status_code == 409 and "import one on the Models page" in response.text
    with Session(get_engine()) as session:
        assert VoiceModels.of(session) == VoiceModels(speech=None, transcription=None, audio=frozenset())
        assert session.get(ConversationMessage, reply) is not None


def test_spoken_text_leaves_out_code_and_markup_and_stops_at_a_sentence_within_the_limit() -> None:
    assert spoken_text(REPLY) == "Hello there. This reply is read aloud."
    long = "One more sentence. " * (MAX_INPUT_CHARS // 10)
    spoken = spoken_text(long)
    assert len(spoken) <= MAX_INPUT_CHARS and spoken.endswith("sentence.")
