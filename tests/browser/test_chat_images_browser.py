"""Images in the playground, in a real browser with the tiny random-weight vision model: attach
by the file chooser and by paste (new chat), by drag and drop (htmx send), see the previews
and then the thumbnails in the message and a streamed reply, reload and the images are still
there; attaching is disabled with a hint for a text-only model. No console error, no request
leaving the live server (previews are blob: URLs, thumbnails come from /chat/images).

Writes docs/screenshots/chat-images.png on the way.
"""

from __future__ import annotations

import base64
import io
import re
from pathlib import Path

import pytest
from PIL import Image
from playwright.sync_api import FilePayload, Page, expect
from sqlmodel import Session

from mlx_server.database import get_engine
from mlx_server.records import ModelRecord, ModelSource
from tests.browser.support import SECONDS, browse, screenshot

REPLY_SECONDS = 90  # the first reply also loads the model
# A synthetic paste or drop event carrying one image file, as the browser makes for a real one.
FILE_EVENT = """([kind, b64, name]) => {
  const bytes = Uint8Array.from(atob(b64), c => c.charCodeAt(0));
  const transfer = new DataTransfer();
  transfer.items.add(new File([bytes], name, { type: 'image/png' }));
  const target = document.querySelector('#chat-input');
  const event = kind === 'paste'
    ? new ClipboardEvent('paste', { clipboardData: transfer, bubbles: true, cancelable: true })
    : new DragEvent('drop', { dataTransfer: transfer, bubbles: true, cancelable: true });
  target.dispatchEvent(event);
}"""
ALL_LOADED = """selector => {
  const imgs = [...document.querySelectorAll(selector)];
  return imgs.length > 0 && imgs.every(img => img.complete && img.naturalWidth > 0);
}"""
# Whether a reply being generated (followed over server-sent events) was on the page, and the
# longest text it showed; reset per turn.
RECORD_TURNS = """
window.__turn = { seen: false, longest: 0 };
document.addEventListener('DOMContentLoaded', () => new MutationObserver(() => {
  const reply = document.querySelector('#streaming-message');
  if (!reply) return;
  window.__turn.seen = true;
  const text = reply.querySelector('.stream-text')?.textContent ?? '';
  window.__turn.longest = Math.max(window.__turn.longest, text.length);
}).observe(document.body, { childList: true, subtree: true, characterData: true }));
"""


def png(color: str) -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", (64, 48), color).save(buffer, "PNG")
    return buffer.getvalue()


@pytest.fixture
def models(live_server: str, tiny_vision_dir: Path, smollm_dir: Path) -> None:
    with Session(get_engine()) as session:
        session.add(ModelRecord(id="tiny-vl", source=ModelSource.LOCAL, path=str(tiny_vision_dir)))
        session.add(ModelRecord(id="smol", source=ModelSource.LOCAL, path=str(smollm_dir)))
        session.commit()


def _file_event(page: Page, kind: str, data: bytes, name: str) -> None:
    page.evaluate(FILE_EVENT, [kind, base64.b64encode(data).decode(), name])


def _reply_done(page: Page, replies: int) -> None:
    expect(page.locator("#messages .msg-assistant")).to_have_count(replies, timeout=REPLY_SECONDS * SECONDS)
    expect(page.locator("#send-button")).to_be_enabled(timeout=REPLY_SECONDS * SECONDS)
    expect(page.locator("#streaming-message")).to_have_count(0)
    expect(page.locator("#chat-status")).to_have_text("")


def _loaded(page: Page, selector: str, count: int) -> None:
    """`count` images match, and every one has been fetched and decoded by the browser."""
    expect(page.locator(selector)).to_have_count(count)
    page.wait_for_function(ALL_LOADED, arg=selector)


def _thumbnails_loaded(page: Page, count: int) -> None:
    _loaded(page, "#messages .msg-user img.thumb", count)


@pytest.mark.browser
def test_images_attached_by_chooser_paste_and_drop_are_sent_shown_and_kept(
    live_server: str, chromium: Path, models: None
) -> None:
    with browse(live_server, chromium) as page:
        page.add_init_script(RECORD_TURNS)
        page.goto(live_server + "/chat")
        model = page.get_by_role("main").get_by_label("Model")
        model.select_option("smol")
        expect(page.locator("#image-input")).to_be_disabled()
        expect(page.locator("#attach-hint")).to_have_text(
            "The selected model reads text only: pick a vision model to attach images."
        )
        model.select_option("tiny-vl")
        expect(page.locator("#image-input")).to_be_enabled()

        with page.expect_file_chooser() as chooser:
            page.locator("#attach-button").click()
        red: FilePayload = {"name": "red.png", "mimeType": "image/png", "buffer": png("red")}
        chooser.value.set_files([red])
        _file_event(page, "paste", png("green"), "pasted.png")
        previews = page.locator("#attachment-previews img.thumb")
        _loaded(page, "#attachment-previews img.thumb", 2)

        panel = page.locator("details.chat-controls")
        panel.locator("summary").click()
        panel.get_by_label("Temperature").fill("0")
        panel.get_by_label("Max tokens").fill("16")
        panel.locator("summary").click()
        box = page.get_by_role("textbox", name="Message")
        box.fill("What colours are these?")
        box.press("Enter")

        page.wait_for_url(re.compile(r"/chat/\d+$"))
        _thumbnails_loaded(page, 2)
        _reply_done(page, 1)
        expect(page.locator("#messages .msg-assistant [data-testid=message-stats]")).to_contain_text("tokens")

        # A second message in the conversation goes through htmx (multipart): an image dropped.
        _file_event(page, "drop", png("blue"), "dropped.png")
        expect(previews).to_have_count(1)
        page.evaluate("window.__turn = { seen: false, longest: 0 }")
        box.fill("And this one?")
        box.press("Enter")
        _reply_done(page, 2)
        assert page.evaluate("window.__turn.seen")  # the reply was followed live, then stored
        expect(previews).to_have_count(0)  # the composer is cleared once the message is accepted
        _thumbnails_loaded(page, 3)
        screenshot(page, "chat-images.png")

        page.reload()
        _thumbnails_loaded(page, 3)
        expect(page.locator("#messages .msg-assistant")).to_have_count(2)
