"""Stored XSS payloads rendered inert: model ids sent to /v1 (shown on the audit page), a
conversation's title and messages, a model's id, settings fields. If any payload ran in the
browser it would set `window.__xss`; each page must show the payload as text instead."""

from __future__ import annotations

import re
from pathlib import Path

import httpx
import pytest
from sqlmodel import Session

from mlx_manager.services.conversations import add_message, create_conversation, rename_conversation
from mlx_manager.services.settings_store import HUB_CACHE_DIR, set_setting
from mlx_server.database import get_engine
from mlx_server.records import ModelRecord, ModelSource
from tests.browser.support import browse

PAYLOADS = [
    "<script>window.__xss = 1</script>",
    '"><img src=x onerror="window.__xss = 2">',
    '\'><svg onload="window.__xss = 3">',
]


def _store_payloads(live_server: str) -> int:
    """Every payload where the dashboard shows stored text; the conversation's id."""
    with httpx.Client(base_url=live_server, timeout=30) as api:
        for payload in PAYLOADS:
            chat = {"model": payload, "messages": [{"role": "user", "content": "hi"}]}
            assert api.post("/v1/chat/completions", json=chat).status_code == 404
            assert api.post("/v1/messages", json={**chat, "max_tokens": 1}).status_code == 404
    with Session(get_engine()) as session:
        conversation = create_conversation(session, model_id=PAYLOADS[0], system_prompt=PAYLOADS[1])
        rename_conversation(session, conversation, " ".join(PAYLOADS))
        for payload in PAYLOADS:
            add_message(session, conversation, role="user", content=payload)
            add_message(session, conversation, role="assistant", content=payload, reasoning=payload)
        session.add(ModelRecord(id=PAYLOADS[1], source=ModelSource.LOCAL, path="/nonexistent"))
        set_setting(session, HUB_CACHE_DIR, "/nonexistent/" + PAYLOADS[2])
        session.commit()
        assert conversation.id is not None
        return conversation.id


@pytest.mark.browser
def test_stored_payloads_render_as_text_and_never_run(live_server: str, chromium: Path) -> None:
    conversation_id = _store_payloads(live_server)
    pages = [
        "/audit",
        "/audit?model=" + PAYLOADS[0],
        f"/chat/{conversation_id}",
        "/chat",
        "/models",
        "/settings",
    ]
    with browse(live_server, chromium) as page:
        shown = 0
        for path in pages:
            page.goto(live_server + path)
            page.wait_for_load_state("networkidle")
            assert page.evaluate("window.__xss") is None, path
            shown += page.locator("body").inner_text().count("window.__xss")
        # The audit rows' own pages, opened from the list.
        page.goto(live_server + "/audit")
        hrefs = page.locator("a[href^='/audit/']").evaluate_all("els => els.map(e => e.href)")
        details = [href for href in hrefs if re.search(r"/audit/\d+$", href)]
        assert len(details) >= len(PAYLOADS)
        for link in details[:6]:
            page.goto(link)
            assert page.evaluate("window.__xss") is None, link
        # A value sent back to a form (refused, then shown again in its input) stays a value.
        page.goto(live_server + "/settings")
        page.fill("input[name=endpoint]", "http://x/" + PAYLOADS[1])
        page.locator("form[action='/settings/hub'] button[type=submit]").last.click()
        page.wait_for_load_state("networkidle")
        assert page.evaluate("window.__xss") is None
    assert shown >= len(pages)  # the payloads are on the pages, as text
