"""The playground's voice in a real browser: "Read aloud" plays a reply spoken by the random-weight
KittenTTS (tests/fixtures/tiny_tts_model.py) through an <audio> element."""

from __future__ import annotations

from pathlib import Path

import pytest
from playwright.sync_api import expect

from tests.browser.support import SECONDS, browse
from tests.support import store_exchange

# Headless chromium has no sound card; audio still decodes and the clock runs.
AUDIO_ARGS = ["--autoplay-policy=no-user-gesture-required"]


@pytest.mark.browser
def test_read_aloud_plays_the_reply_in_an_audio_element(
    live_server: str, chromium: Path, smollm_dir: Path, tiny_tts_dir: Path
) -> None:
    cid, _, _ = store_exchange(
        {"smol": smollm_dir, "tiny-tts": tiny_tts_dir}, "Hello there. How are you today?"
    )
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
