"""The playground's voice in a real browser: "Read aloud" plays a reply spoken by the random-weight
KittenTTS (tests/fixtures/tiny_tts_model.py) through an <audio> element, and the microphone
button puts what a fake microphone said into the message box (whisper tiny.en)."""

from __future__ import annotations

from pathlib import Path

import pytest
from playwright.sync_api import expect

from tests.browser.support import SECONDS, browse
from tests.fixtures.speech_clips import FOX, word_error_rate
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


@pytest.mark.browser
def test_the_microphone_fills_the_message_box_with_the_transcript(
    live_server: str, chromium: Path, smollm_dir: Path, whisper_dir: Path, fox_clip: Path
) -> None:
    """chromium's fake microphone plays the espeak-ng clip (looped); the page records it with
    MediaRecorder, decodes it to a 16 kHz WAV, and whisper tiny.en transcribes it."""
    cid, _, _ = store_exchange({"smol": smollm_dir, "whisper-tiny.en": whisper_dir}, "Hello.")
    microphone = [
        "--use-fake-ui-for-media-stream",
        "--use-fake-device-for-media-stream",
        f"--use-file-for-fake-audio-capture={fox_clip}",
    ]
    with browse(live_server, chromium, microphone) as page:
        page.goto(f"{live_server}/chat/{cid}")
        mic = page.get_by_role("button", name="Record")
        mic.click()
        expect(page.locator("#mic-status")).to_contain_text("Recording")
        page.wait_for_timeout(4.2 * SECONDS)  # the clip is about 3.8 s long
        page.get_by_role("button", name="Stop recording").click()
        message = page.get_by_label("Message")
        expect(message).not_to_have_value("", timeout=240 * SECONDS)  # whisper on a busy CPU
        heard = message.input_value()
        # The fake device loops the clip: the recording may end a word into its next round. With
        # both cores busy, chromium's capture garbles a word or two (seen once in CI: "The quick,
        # drowin' fox jump so the lazy dog"), so up to 3 of the 9 words may be off; a recording
        # that does not reach whisper, or reaches it as noise, gets most of them wrong.
        assert word_error_rate(FOX, " ".join(heard.split()[:9])) <= 1 / 3, heard
        expect(page.locator("#mic-status")).to_contain_text("Transcribed")
