"""The playground's voice in a real browser: "Read aloud" plays a reply spoken by the random-weight
KittenTTS (tests/fixtures/tiny_tts_model.py) through an <audio> element."""

from __future__ import annotations

from pathlib import Path

import pytest
from playwright.sync_api import expect
from sqlmodel import Session

from mlx_manager.services.conversations import add_message, create_conversation
from mlx_server.database import get_engine
from mlx_server.records import ModelRecord, ModelSource
from tests.browser.support import SECONDS, browse

# Headless chromium has no sound card; audio still decodes and the clock runs.
AUDIO_ARGS = ["--autoplay-policy=no-user-gesture-required"]


def _stored_exchange(models: dict[str, Path], reply: str) -> int:
    with Session(get_engine()) as session:
        for model_id, path in models.items():
            session.add(ModelRecord(id=model_id, source=ModelSource.LOCAL, path=str(path)))
        session.commit()
        conversation = create_conversation(session, model_id="smol")
        add_message(session, conversation, "user", "Say hello.")
        add_message(session, conversation, "assistant", reply)
        session.commit()
        assert conversation.id is not None
        return conversation.id


@pytest.mark.browser
def test_read_aloud_plays_the_reply_in_an_audio_element(
    live_server: str, chromium: Path, smollm_dir: Path, tiny_tts_dir: Path
) -> None:
    cid = _stored_exchange({"smol": smollm_dir, "tiny-tts": tiny_tts_dir}, "Hello there. How are you today?")
    with browse(live_server, chromium, AUDIO_ARGS) as page:
        page.goto(f"{live_server}/chat/{cid}")
        reply = page.locator(".msg-assistant")
        reply.get_by_role("button", name="Read aloud").click()
        player = reply.locator("audio.read-aloud-player")
        expect(player).to_have_count(1)
        # Playing: the element's clock moves past the start of the spoken audio.
        page.wait_for_function(
            "() => { const a = document.querySelector('audio.read-aloud-player');"
            " return a && !a.error && a.currentTime > 0.2; }",
            timeout=30 * SECONDS,
        )
        assert player.evaluate("a => a.error") is None
