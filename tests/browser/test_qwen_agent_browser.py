"""The playground's agent loop with the real Qwen2.5-Coder-0.5B (tests/conftest.py::qwen_server):
asked "What is 1234 × 5678?" with the calculator offered and tool_choice left on auto, it calls
the calculator by itself (a fenced JSON call: services/pipeline/json_calls.py), the card shows
the call and the exact product, and the answer after it carries the result."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from playwright.sync_api import expect

from tests.browser.support import SECONDS, browse
from tests.support import ServerProcess

PRODUCT = 1234 * 5678  # 7006652
AGENT_SECONDS = 600  # two replies of the 0.5B model on a busy 2-core machine


@pytest.mark.browser
def test_qwen_calls_the_calculator_and_answers_with_its_result(
    qwen_server: ServerProcess, chromium: Path
) -> None:
    with browse(qwen_server.url, chromium) as page:
        page.goto(qwen_server.url + "/chat")
        page.get_by_role("main").get_by_label("Model").select_option("qwen")
        panel = page.locator("details.chat-controls")
        panel.locator("summary").click()
        panel.get_by_label("Temperature").fill("0")
        panel.get_by_label("Max tokens").fill("64")
        panel.get_by_role("checkbox", name=re.compile(r"^calculator")).check()
        expect(panel.get_by_label("Tool choice")).to_have_value("auto")
        panel.get_by_label("Max depth").fill("1")  # one tool round, then the answer
        panel.locator("summary").click()
        box = page.get_by_role("textbox", name="Message")
        box.fill("What is 1234 × 5678?")
        box.press("Enter")

        card = page.locator("#messages .tool-card").filter(has_text="calculator").first
        expect(card).to_be_visible(timeout=AGENT_SECONDS * SECONDS)
        expect(card.locator(".tool-args")).to_contain_text("1234")
        expect(card.locator(".tool-result pre")).to_have_text(str(PRODUCT), timeout=AGENT_SECONDS * SECONDS)
        expect(page.locator("#send-button")).to_be_enabled(timeout=AGENT_SECONDS * SECONDS)
        answer = page.locator("#messages .msg-assistant").last
        expect(answer.locator(".tool-card")).to_have_count(0)
        digits = re.sub(r"[^\d]", "", answer.locator(".msg-text").inner_text())
        assert str(PRODUCT) in digits
