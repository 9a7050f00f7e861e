"""The chat playground in a real browser with the real SmolLM2: Chat opens ready to type and the
first message creates the conversation, a reply streams in, Stop ends it, Regenerate replaces
it, Edit rewinds and resends, a reload shows the same history, the agent loop runs the
calculator, model output with markup stays text, export and rename. A reply outlives its page,
and a restart keeps it, marked interrupted.

Writes docs/screenshots/chat.png and chat-tools.png on the way.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from playwright.sync_api import ElementHandle, Locator, Page, expect
from sqlmodel import Session

from mlx_manager.services.conversations import add_message, create_conversation
from mlx_server.database import get_engine, upgrade_database
from mlx_server.records import ModelRecord, ModelSource
from tests.browser.support import SECONDS, VIEWPORT, browse, screenshot
from tests.support import ServerProcess

REPLY_SECONDS = 60  # the first reply also loads the model
# A required call compiles its grammar before the first token: on a busy 2-core machine that
# alone can take a minute, and the loop runs up to three replies.
AGENT_SECONDS = 300
XSS_REPLY = 'Hi <script>window.__xss=1</script> <img src=x onerror="window.__xss=2">'

# Every non-empty length the streaming reply's text had while it was on the page (installed in
# every page the browser loads: the first message opens the new conversation's page).
RECORD_STREAM_LENGTHS = """
window.__streamLengths = [];
document.addEventListener('DOMContentLoaded', () => new MutationObserver(() => {
  const text = document.querySelector('#streaming-message .stream-text');
  if (text && text.textContent.length) window.__streamLengths.push(text.textContent.length);
}).observe(document.body, { childList: true, subtree: true, characterData: true }));
"""
STREAMED = "#streaming-message .stream-text"
GREW = "n => (document.querySelector('#streaming-message .stream-text')?.textContent.length ?? 0) > n"
ROLES = """() => [...document.querySelectorAll('#messages .msg')]
  .map(m => m.classList.contains('msg-user') ? 'user' : 'assistant')"""


@pytest.fixture
def smol(live_server: str, smollm_dir: Path) -> str:
    """SmolLM2 registered as a local model in the live server's database."""
    with Session(get_engine()) as session:
        session.add(ModelRecord(id="smol", source=ModelSource.LOCAL, path=str(smollm_dir)))
        session.commit()
    return "smol"


def _new_chat(page: Page, live_server: str) -> None:
    """Chat opens ready to type: the message box has the focus, nothing is stored yet."""
    page.goto(live_server + "/chat")
    expect(page.get_by_role("textbox", name="Message")).to_be_focused()
    page.get_by_role("main").get_by_label("Model").select_option("smol")
    expect(
        page.get_by_role("complementary", name="Conversations").locator(".conversation-list a")
    ).to_have_count(0)


def _set_parameters(page: Page, *, max_tokens: int, calculator: bool = False) -> None:
    """Greedy decoding and a small budget, set in the parameters panel (opened, then closed)."""
    panel = page.locator("details.chat-controls")
    panel.locator("summary").click()
    expect(panel.get_by_label("Temperature")).to_be_visible()
    panel.get_by_label("Temperature").fill("0")
    panel.get_by_label("Max tokens").fill(str(max_tokens))
    if calculator:
        panel.get_by_role("checkbox", name=re.compile(r"^calculator")).check()
        panel.get_by_label("Tool choice").select_option("required")
        # One tool round, then the answer: a second round would prefill and decode again
        # (~20 s here) and show nothing the first does not.
        panel.get_by_label("Max depth").fill("1")
    panel.locator("summary").click()
    expect(panel.get_by_label("Temperature")).to_be_hidden()


def _send(page: Page, text: str) -> None:
    """Type a message and press Enter, as a user does."""
    box = page.get_by_role("textbox", name="Message")
    box.fill(text)
    box.press("Enter")


def _reply_done(page: Page, seconds: float = REPLY_SECONDS) -> None:
    """The turn is over: Send is back, nothing streams, no error is shown."""
    expect(page.locator("#send-button")).to_be_enabled(timeout=seconds * SECONDS)
    expect(page.locator("#streaming-message")).to_have_count(0)
    expect(page.locator("#stop-button")).to_be_hidden()
    expect(page.locator("#chat-status")).to_have_text("")


def _roles(page: Page) -> list[str]:
    return list(page.evaluate(ROLES))


def _attached(handles: list[ElementHandle]) -> list[bool]:
    return [bool(handle.evaluate("e => e.isConnected")) for handle in handles]


def _assistant_elements(page: Page) -> list[ElementHandle]:
    """The assistant bubbles now on the page (SQLite reuses ids, so the elements tell replies apart)."""
    return [m.element_handle() for m in page.locator("#messages .msg-assistant").all()]


def _bubbles(page: Page) -> list[str]:
    return [m.inner_text() for m in page.locator("#messages .msg .msg-text").all()]


def _conversation_links(page: Page) -> Locator:
    return page.get_by_role("complementary", name="Conversations").locator(".conversation-list a")


def _current_conversation(page: Page) -> Locator:
    return page.get_by_role("complementary", name="Conversations").locator('a[aria-current="page"]')


def _stats(message: Locator) -> Locator:
    return message.get_by_test_id("message-stats")


def _stream_a_reply(page: Page, live_server: str) -> None:
    """Shift+Enter is a new line; Enter sends (and creates the conversation: its page opens);
    the reply grows on the page, then is saved."""
    box = page.get_by_role("textbox", name="Message")
    box.press_sequentially("What is the capital")
    box.press("Shift+Enter")
    expect(box).to_have_value("What is the capital\n")
    expect(page.locator("#messages .msg")).to_have_count(0)  # nothing was sent
    box.press_sequentially("of France?")
    box.press("Enter")
    page.wait_for_url(re.compile(re.escape(live_server) + r"/chat/\d+$"))
    expect(
        page.get_by_role("complementary", name="Conversations").locator(".conversation-list a")
    ).to_have_count(1)

    user = page.locator("#messages .msg-user")
    expect(user).to_have_count(1)
    expect(user.locator(".user-text")).to_have_text("What is the capital\nof France?")
    expect(box).to_have_value("")
    _reply_done(page)
    lengths = page.evaluate("() => window.__streamLengths")
    assert len(set(lengths)) >= 2, f"the reply did not stream: lengths seen {lengths}"
    assert _roles(page) == ["user", "assistant"]
    reply = page.locator("#messages .msg-assistant")
    expect(reply.locator(".msg-text")).not_to_be_empty()
    expect(_stats(reply)).to_contain_text("tok/s")
    expect(reply.get_by_role("button", name="Regenerate")).to_be_enabled()
    # The first message names the conversation.
    expect(_current_conversation(page)).to_have_text("What is the capital of France?")
    expect(page.get_by_role("textbox", name="Title")).to_have_value("What is the capital of France?")
    expect(page).to_have_title("What is the capital of France? · MLX Manager")


def _regenerate(page: Page) -> None:
    old = _assistant_elements(page)
    page.locator("#messages .msg-assistant").get_by_role("button", name="Regenerate").click()
    _reply_done(page)
    assert _roles(page) == ["user", "assistant"]  # replaced, not added
    assert _attached(old) == [False]
    expect(page.locator("#messages .msg-assistant .msg-text")).not_to_be_empty()
    expect(_stats(page.locator("#messages .msg-assistant"))).to_contain_text("tok/s")


def _edit_first_and_resend(page: Page) -> None:
    _send(page, "Name a color.")
    _reply_done(page)
    assert _roles(page) == ["user", "assistant", "user", "assistant"]
    before = _assistant_elements(page)

    first = page.locator("#messages .msg-user").first
    first.locator("summary", has_text="Edit").click()
    editor = first.locator("details.edit-message textarea")
    expect(editor).to_have_value("What is the capital\nof France?")
    editor.fill("What is the capital of Italy?")
    first.get_by_role("button", name="Save and resend").click()
    _reply_done(page)
    assert _roles(page) == ["user", "assistant"]  # the later messages are gone
    expect(page.locator("#messages .msg-user .user-text")).to_have_text("What is the capital of Italy?")
    expect(page.get_by_text("Name a color.")).to_have_count(0)
    assert _attached(before) == [False, False]
    expect(page.locator("#messages .msg-assistant .msg-text")).not_to_be_empty()


def _stop_mid_stream(page: Page) -> None:
    _set_parameters(page, max_tokens=300)
    _send(page, "Write a long story about a dragon.")
    streamed = page.locator("#streaming-message .stream-text")
    expect(streamed).to_have_text(re.compile(r"\S.{15,}", re.S), timeout=REPLY_SECONDS * SECONDS)
    expect(page.locator("#send-button")).to_be_disabled()
    # Nothing else can be posted while the reply streams (the server would refuse it).
    resend = page.locator("#messages .msg-user").last.locator("details.edit-message button")
    expect(resend).to_have_text("Save and resend")
    expect(resend).to_be_disabled()
    stop = page.get_by_role("button", name="Stop")
    expect(stop).to_be_visible()
    stop.click()

    reply = page.locator("#messages .msg-assistant").last
    expect(_stats(reply)).to_contain_text("stopped", timeout=5 * SECONDS)
    expect(page.locator("#send-button")).to_be_enabled()
    _reply_done(page)
    assert _roles(page) == ["user", "assistant", "user", "assistant"]
    expect(reply.locator(".msg-text")).not_to_be_empty()


def _reload_shows_history(page: Page, title: str) -> None:
    roles, bubbles = _roles(page), _bubbles(page)
    stats = [_stats(m).inner_text() for m in page.locator("#messages .msg-assistant").all()]
    page.reload()
    assert _roles(page) == roles
    assert _bubbles(page) == bubbles
    assert [_stats(m).inner_text() for m in page.locator("#messages .msg-assistant").all()] == stats
    expect(_current_conversation(page)).to_have_text(title)


def _export_and_rename(page: Page, live_server: str) -> None:
    with page.expect_download() as info:
        page.get_by_role("link", name="Export Markdown").click()
    download = info.value
    assert re.fullmatch(r"chat-\d+\.md", download.suggested_filename)
    markdown = Path(download.path()).read_text()
    assert "## User\n\nWhat is the capital of Italy?" in markdown
    assert "## User\n\nWrite a long story about a dragon." in markdown
    first_reply = page.locator("#messages .msg-assistant .msg-text").first.inner_text()
    assert first_reply.split("\n")[0].strip() in markdown

    href = page.get_by_role("link", name="Export JSON").get_attribute("href")
    assert href is not None
    exported = json.loads(page.request.get(live_server + href).text())
    assert [m["role"] for m in exported["messages"]] == ["user", "assistant", "user", "assistant"]
    assert exported["messages"][2]["content"] == "Write a long story about a dragon."

    title = page.get_by_role("textbox", name="Title")
    title.fill("Capitals and dragons")
    page.get_by_role("button", name="Rename").click()
    expect(page).to_have_title("Capitals and dragons · MLX Manager")
    expect(_conversation_links(page)).to_have_text(["Capitals and dragons"])
    expect(title).to_have_value("Capitals and dragons")


@pytest.mark.browser
def test_a_reply_streams_stops_regenerates_resends_after_an_edit_and_survives_a_reload(
    live_server: str, smol: str, chromium: Path
) -> None:
    with browse(live_server, chromium) as page:
        page.add_init_script(RECORD_STREAM_LENGTHS)
        _new_chat(page, live_server)
        # Four short replies (the first, its regeneration, the edit's two): 12 tokens each
        # stream in several pieces, which is all these steps check of a reply's text.
        _set_parameters(page, max_tokens=12)
        _stream_a_reply(page, live_server)
        _regenerate(page)
        _edit_first_and_resend(page)
        _stop_mid_stream(page)
        _reload_shows_history(page, "What is the capital of France?")  # named by the first message sent
        _export_and_rename(page, live_server)


@pytest.mark.browser
def test_the_agent_loop_shows_the_calculator_card_its_result_and_the_answer(
    live_server: str, smol: str, chromium: Path
) -> None:
    with browse(live_server, chromium) as page:
        _new_chat(page, live_server)
        # The call (about 20 tokens) fits, and the answer after it needs only to be there.
        _set_parameters(page, max_tokens=24, calculator=True)
        _send(page, "What is 12 times 7?")

        card = page.locator("#messages .tool-card").filter(has_text="calculator").first
        expect(card).to_be_visible(timeout=AGENT_SECONDS * SECONDS)
        expect(card.locator(".tool-name")).to_have_text("calculator")
        expect(card.locator(".tool-args")).to_contain_text('"expression"')
        expect(card.locator(".tool-result pre")).not_to_be_empty(timeout=AGENT_SECONDS * SECONDS)
        _reply_done(page, AGENT_SECONDS)
        assert _roles(page) == ["user", "assistant", "assistant"]  # the tool round, then the answer
        answer = page.locator("#messages .msg-assistant").last
        expect(answer.locator(".tool-card")).to_have_count(0)
        expect(answer.locator(".msg-text")).not_to_be_empty()
        expect(_stats(answer)).to_contain_text("tok/s")
        regenerate = page.get_by_role("button", name="Regenerate")
        expect(regenerate).to_have_count(1)  # on the last reply only, not on the tool round's
        expect(answer.get_by_role("button", name="Regenerate")).to_be_enabled()
        screenshot(page, "chat.png")

        result = card.locator(".tool-result pre").inner_text()
        page.reload()  # the card keeps its result; the panel keeps the tool settings
        card = page.locator("#messages .tool-card").filter(has_text="calculator").first
        expect(card.locator(".tool-result pre")).to_have_text(result)
        panel = page.locator("details.chat-controls")
        panel.locator("summary").click()
        expect(panel.get_by_role("checkbox", name=re.compile(r"^calculator"))).to_be_checked()
        expect(panel.get_by_label("Tool choice")).to_have_value("required")
        screenshot(page, "chat-tools.png")


@pytest.mark.browser
def test_a_reply_with_script_and_img_markup_is_shown_as_text(
    live_server: str, smol: str, chromium: Path
) -> None:
    with Session(get_engine()) as session:
        conversation = create_conversation(session, model_id=smol)
        add_message(session, conversation, "user", "Say hi.")
        add_message(session, conversation, "assistant", XSS_REPLY)
        conversation_id = conversation.id

    with browse(live_server, chromium) as page:
        page.goto(f"{live_server}/chat/{conversation_id}")
        reply = page.locator("#messages .msg-assistant .msg-text")
        expect(reply).to_contain_text("<script>window.__xss=1</script>")
        expect(reply).to_contain_text('<img src=x onerror="window.__xss=2">')
        assert page.evaluate("() => typeof window.__xss") == "undefined"
        expect(page.locator(".msg img")).to_have_count(0)
        expect(page.locator(".msg script")).to_have_count(0)


@pytest.mark.browser
def test_a_reply_outlives_its_page_and_a_restart_keeps_it_marked_interrupted(
    home: Path, smollm_dir: Path, chromium: Path, tmp_path: Path
) -> None:
    """`mlx-manager serve` as users run it: a long reply goes on when its page is closed and is
    there, still growing, when the conversation is opened again; Chat then opens with the
    last-used model; a reply cut by a restart is kept, marked interrupted."""
    upgrade_database()
    with Session(get_engine()) as session:
        for model_id in ("smol", "smol-2"):  # the last-used one is not the first in the list
            session.add(ModelRecord(id=model_id, source=ModelSource.LOCAL, path=str(smollm_dir)))
        session.commit()
    log = tmp_path / "serve.log"
    server = ServerProcess(home, log)
    server.start()
    try:
        with browse(server.url, chromium) as page:
            _new_chat(page, server.url)
            page.get_by_role("main").get_by_label("Model").select_option("smol-2")
            # Long enough to still be growing after the page is closed and opened again.
            _set_parameters(page, max_tokens=60)
            _send(page, "Write a long story about a dragon.")
            page.wait_for_url(re.compile(re.escape(server.url) + r"/chat/\d+$"))
            expect(_conversation_links(page)).to_have_count(1)
            conversation = page.url
            _streaming(page)
            assert page.context.browser is not None
            reopened = page.context.browser.new_page(viewport=VIEWPORT)  # as a new tab would
            page.close()  # the turn is the app's: it goes on
            reopened.goto(conversation)
            so_far = len(reopened.locator(STREAMED).inner_text())
            assert so_far > 10, "the reopened page does not show the reply so far"
            reopened.wait_for_function(GREW, arg=so_far, timeout=REPLY_SECONDS * SECONDS)
            _reply_done(reopened)
            expect(_stats(reopened.locator("#messages .msg-assistant").last)).to_contain_text("tok/s")
            reopened.goto(server.url + "/chat")
            expect(reopened.get_by_role("main").get_by_label("Model")).to_have_value("smol-2")

            reopened.goto(conversation)
            _send(reopened, "Tell me another long story.")
            _streaming(reopened)
            reopened.close()  # (a closed page: no console error from the server going away)
            server.stop()  # mid-reply
    finally:
        if server.process is not None and server.process.poll() is None:
            server.process.kill()
    restarted = ServerProcess(home, log)
    restarted.start()
    try:
        _cut_reply_is_kept(restarted.url + conversation.removeprefix(server.url), chromium)
    finally:
        restarted.stop()


def _streaming(page: Page) -> None:
    """The reply is growing on the page."""
    expect(page.locator(STREAMED)).to_have_text(
        re.compile(r"\S.{10,}", re.S), timeout=REPLY_SECONDS * SECONDS
    )


def _cut_reply_is_kept(conversation: str, chromium: Path) -> None:
    with browse(conversation.rsplit("/chat/", 1)[0], chromium) as page:
        page.goto(conversation)
        assert _roles(page) == ["user", "assistant", "user", "assistant"]
        cut = page.locator("#messages .msg-assistant").last
        expect(_stats(cut)).to_contain_text("interrupted")
        expect(cut.locator(".msg-text")).to_have_text(re.compile(r"\S.{10,}", re.S))
        expect(page.locator("#streaming-message")).to_have_count(0)
        expect(page.locator("#send-button")).to_be_enabled()
