"""A turn is a job the app owns, with the real SmolLM2: the reply is saved as it grows, a page
opened mid-reply re-attaches to it, a second send waits, and a reply cut by a shutdown or a
crash is kept and marked interrupted."""

from __future__ import annotations

import time
from pathlib import Path

from fastapi.testclient import TestClient
from sqlmodel import Session

from mlx_manager.records import ConversationMessage, MessageStatus
from mlx_manager.services.conversations import add_message, create_conversation, messages_of
from mlx_server.database import get_engine, upgrade_database
from mlx_server.records import ModelRecord, ModelSource
from tests.support import csrf_headers

LONG = {
    "model_id": "smol",
    "temperature": "0",
    # About five seconds of reply here: it is still running well after it was saved twice
    # (every 0.5 s), when the tests open the page or stop the app.
    "max_tokens": "48",
    "content": "Write a long story about a dragon.",
}


def _start(client: TestClient) -> int:
    response = client.post("/chat/send", data=LONG, follow_redirects=False)
    assert response.status_code == 303, response.text
    return int(response.headers["location"].rsplit("/", 1)[1])


def _register(model: ModelRecord) -> None:
    with Session(get_engine()) as session:
        session.add(model)
        session.commit()


def _reply(conversation_id: int) -> ConversationMessage | None:
    with Session(get_engine()) as session:
        return next((m for m in messages_of(session, conversation_id) if m.role == "assistant"), None)


def _growing(conversation_id: int, lengths: int = 2, timeout: float = 120) -> list[str]:
    """The stored reply's text while it runs, until it took `lengths` different lengths."""
    seen: list[str] = []
    deadline = time.monotonic() + timeout
    while len(set(seen)) < lengths:
        assert time.monotonic() < deadline, f"the stored reply did not grow: {seen}"
        reply = _reply(conversation_id)
        if reply is not None and reply.content:
            assert reply.status == MessageStatus.RUNNING, reply
            seen.append(reply.content)
        time.sleep(0.2)
    return seen


def test_the_reply_is_saved_as_it_grows_and_a_page_opened_mid_reply_re_attaches(page: TestClient) -> None:
    cid = _start(page)
    saved = _growing(cid)
    assert saved[-1].startswith(saved[0])  # the same reply, longer
    opened = page.get(f"/chat/{cid}").text  # a reload, or a second tab
    assert f'sse-connect="/chat/{cid}/events"' in opened and 'id="streaming-message"' in opened
    assert saved[-1][:20] in opened  # what is there so far, before any event
    refused = page.post(f"/chat/{cid}/send", data={**LONG, "content": "And then?"})
    assert refused.status_code == 409 and "Stop the reply being generated first." in refused.text
    with page.stream("GET", f"/chat/{cid}/events") as events:
        lines = list(events.iter_lines())
    assert "event: turn" in lines and lines.count("event: done") == 1
    reply = _reply(cid)
    assert reply is not None and reply.status == MessageStatus.DONE
    assert reply.content.startswith(saved[-1]) and len(reply.content) > len(saved[-1])
    with Session(get_engine()) as session:
        assert [m.role for m in messages_of(session, cid)] == ["user", "assistant"]


def test_a_reply_cut_by_a_shutdown_is_kept_marked_interrupted(home: Path, smollm_dir: Path) -> None:
    from mlx_manager.main import create_app

    upgrade_database()
    _register(ModelRecord(id="smol", source=ModelSource.LOCAL, path=str(smollm_dir)))
    with TestClient(create_app()) as client:
        client.headers.update(csrf_headers(client))
        cid = _start(client)
        partial = _growing(cid, lengths=1)[-1]
    reply = _reply(cid)  # the app stopped mid-reply: what was generated is kept
    assert reply is not None and reply.status == MessageStatus.INTERRUPTED
    assert reply.content.startswith(partial) and reply.stats and reply.stats["finish_reason"] == "interrupted"
    with TestClient(create_app()) as client:
        assert "· interrupted" in client.get(f"/chat/{cid}").text


def test_a_reply_left_running_by_a_crash_is_marked_interrupted_at_start(home: Path) -> None:
    from mlx_manager.main import create_app

    upgrade_database()
    with Session(get_engine(), expire_on_commit=False) as session:
        conversation = create_conversation(session, model_id="smol")
        add_message(session, conversation, "user", "Tell me a story.")
        add_message(session, conversation, "assistant", "Once upon a", status=MessageStatus.RUNNING)
    with TestClient(create_app()) as client:
        page = client.get(f"/chat/{conversation.id}").text
    reply = _reply(conversation.id or 0)
    assert reply is not None and (reply.status, reply.content) == (MessageStatus.INTERRUPTED, "Once upon a")
    assert "Once upon a" in page and "· interrupted" in page and "sse-connect" not in page
