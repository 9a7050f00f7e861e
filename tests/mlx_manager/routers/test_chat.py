"""The playground's event stream with the real SmolLM2: order, reasoning, tool calls and the
agent loop, stop, regenerate, edit, manual tool results, persistence and export."""

from __future__ import annotations

import gc
import html
import json
import os
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlmodel import Session

from mlx_manager.records import ConversationMessage, MessageStatus
from mlx_manager.services.chat_tools import execute_tool
from mlx_server.database import get_engine, upgrade_database
from mlx_server.records import ModelCapabilities, ModelRecord, ModelSource
from tests.support import csrf_headers

HTMX = {"HX-Request": "true"}
GREEDY = {"model_id": "smol", "temperature": "0", "max_tokens": "12"}
# A template that opens a reasoning block for the reply, as Qwen3-style thinking templates do.
THINKING_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n<think>\n{% endif %}"
)


@pytest.fixture
def chat(home: Path, smollm_dir: Path, tmp_path: Path) -> Iterator[TestClient]:
    from mlx_manager.main import create_app

    upgrade_database()
    thinking_dir = tmp_path / "smol-think"
    # SmolLM2's files linked, not copied (114 MB, half a second per test); only the tokenizer
    # config, replaced by a file of its own, differs.
    shutil.copytree(smollm_dir, thinking_dir, copy_function=os.symlink)
    config_path = thinking_dir / "tokenizer_config.json"
    config = json.loads(config_path.read_text())
    config["chat_template"] = THINKING_TEMPLATE
    config_path.unlink()  # the link, not SmolLM2's own file
    config_path.write_text(json.dumps(config))
    with Session(get_engine()) as session:
        session.add(ModelRecord(id="smol", source=ModelSource.LOCAL, path=str(smollm_dir)))
        session.add(ModelRecord(id="smol-think", source=ModelSource.LOCAL, path=str(thinking_dir)))
        session.add(
            ModelCapabilities(
                model_id="smol-think",
                model_type="text-gen",
                model_family="default",
                tool_parser_id="hermes_json",
                thinking_parser_id="think_tag",
                supports_native_tools=False,
            )
        )
        session.commit()
    with TestClient(create_app()) as client:
        client.headers.update(csrf_headers(client))
        yield client


def _first(client: TestClient, form: dict[str, Any]) -> int:
    """Send the first message of a new chat (it creates the conversation); its id."""
    response = client.post("/chat/send", data=form, follow_redirects=False)
    assert response.status_code == 303, response.text
    return int(response.headers["location"].rsplit("/", 1)[1])


def _post(client: TestClient, url: str, form: dict[str, Any] | None = None) -> str:
    """A form posted as the page's htmx does: the thread comes back at once."""
    response = client.post(url, data=form or {}, headers=HTMX)
    assert response.status_code == 200, response.text
    return response.text


def _follow(client: TestClient, cid: int, stop_after: int | None = None) -> list[tuple[str, str]]:
    """The turn's server-sent events as a page receives them, up to "done" (after `stop_after`
    content events, Stop is pressed)."""
    events: list[tuple[str, str]] = []
    name, data = "", []
    with client.stream("GET", f"/chat/{cid}/events") as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        for line in response.iter_lines():
            if line.startswith("event:"):
                name = line.removeprefix("event:").strip()
            elif line.startswith("data:"):
                data.append(line.removeprefix("data:").removeprefix(" "))
            elif not line and data:
                events.append((name, "\n".join(data)))
                name, data = "", []
                if stop_after is not None and sum(n == "content" for n, _ in events) == stop_after:
                    _post(client, f"/chat/{cid}/stop")
                    stop_after = None
    assert events[-1][0] == "done"
    return events


def _turn(
    client: TestClient, cid: int, url: str, form: dict[str, Any] | None = None
) -> list[tuple[str, str]]:
    _post(client, url, form)
    return _follow(client, cid)


def _text(events: list[tuple[str, str]], kind: str) -> str:
    return html.unescape("".join(d for n, d in events if n == kind))


def _conversation_ids() -> list[int]:
    from mlx_manager.services.conversations import list_conversations

    with Session(get_engine()) as session:
        return [c.id for c in list_conversations(session) if c.id is not None]


def _conversations() -> int:
    return len(_conversation_ids())


def _saved(conversation_id: int) -> list[ConversationMessage]:
    from mlx_manager.services.conversations import messages_of

    with Session(get_engine()) as session:
        return messages_of(session, conversation_id)


def test_chat_opens_ready_to_type_and_the_first_message_creates_one_conversation(chat: TestClient) -> None:
    page = chat.get("/chat")
    assert page.status_code == 200 and 'id="chat-input"' in page.text and 'action="/chat/send"' in page.text
    assert _conversations() == 0  # opening Chat stores nothing
    cid = _first(chat, {**GREEDY, "max_tokens": "4", "content": "Say hello."})
    _follow(chat, cid)
    assert _conversations() == 1
    # The next new chat starts from the last-used model (the composer's selected option).
    assert '<option value="smol" selected>' in chat.get("/chat").text.replace("  ", " ")


def test_a_reply_streams_in_order_and_is_saved_with_its_stats(chat: TestClient) -> None:
    cid = _first(chat, {**GREEDY, "content": "What is the capital of France?"})
    events = _follow(chat, cid)
    names = [n for n, _ in events]
    assert names[0] == "turn" and names.count("content") >= 2
    assert any("Loading smol" in d for n, d in events if n == "turn")  # the first use loads it
    user, assistant = _saved(cid)
    assert (user.role, user.content) == ("user", "What is the capital of France?")
    assert assistant.status == MessageStatus.DONE and "Paris" in assistant.content
    assert assistant.content.endswith(_text(events, "content"))  # appended live, then saved
    stats = assistant.stats or {}
    assert stats["completion_tokens"] > 0 and stats["prompt_tokens"] > 0 and stats["tokens_per_s"] > 0
    assert stats["ttft_s"] > 0
    done = events[-1][1]
    assert "Paris" in done and "tok/s" in done and 'id="send-button"' in done and "sse-connect" not in done
    page = chat.get(f"/chat/{cid}").text  # reloading shows the conversation as it was
    assert "What is the capital of France?" in page and "Paris" in page and "tok/s" in page


def test_reasoning_is_streamed_apart_from_content(chat: TestClient) -> None:
    form = {**GREEDY, "model_id": "smol-think", "content": "Hi"}
    cid = _first(chat, form)
    events = _follow(chat, cid)
    [_, assistant] = _saved(cid)
    assert assistant.reasoning and "<think>" not in assistant.reasoning
    assert any(n == "reasoning" for n, _ in events)  # grown live, after the snapshot that opened it
    assert assistant.reasoning.endswith(_text(events, "reasoning").strip())
    assert "<think>" not in assistant.content and "&lt;think&gt;" not in _text(events, "content")
    assert 'class="reasoning"' in chat.get(f"/chat/{cid}").text


def test_required_calculator_call_runs_and_the_model_answers_at_max_depth(chat: TestClient) -> None:
    """One tool round (max depth 1): the call, its result fed back, then a reply without tools."""
    form = {
        **GREEDY,
        "max_tokens": "24",  # the call (about 20 tokens) fits; the answer needs only to be there
        "content": "What is 12 times 7?",
        "builtin_tools": "calculator",
        "tool_choice": "required",
        "max_depth": "1",
    }
    events = _follow(chat, _first(chat, form))
    turns = [d for n, d in events if n == "turn"]
    assert any('class="tool-card"' in t and "calculator" in t for t in turns)  # the card, live
    assert any("maximum depth" in t for t in turns)
    cid = _conversation_ids()[0]
    messages = _saved(cid)
    assert [m.role for m in messages] == ["user", "assistant", "tool", "assistant"]
    call = (messages[1].tool_calls or [])[0]
    assert call["function"]["name"] == "calculator" and "expression" in json.loads(
        call["function"]["arguments"]
    )
    assert not messages[3].tool_calls and messages[3].content  # it answered in words
    # What the calculator made of the model's expression (a 135M model's arithmetic is not the point).
    expected = execute_tool("calculator", call["function"]["arguments"]).content
    assert messages[2].tool_call_id == call["id"] and messages[2].content == expected
    page = chat.get(f"/chat/{cid}").text
    assert 'class="tool-card"' in page and "calculator" in page and "tool-result" in page


def test_stop_ends_the_generation_and_keeps_the_reply_marked_stopped(
    chat: TestClient, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # What Python can only report, e.g. MLX's "[StreamContext] Destroyed in a different thread"
    # from a generation closed off the MLX thread.
    unraisable: list[str] = []
    monkeypatch.setattr(
        sys, "unraisablehook", lambda u: unraisable.append(f"{u.exc_value!r} in {u.object!r}")
    )
    form = {**GREEDY, "max_tokens": "200", "content": "Write a long story about a dragon."}
    cid = _first(chat, form)
    events = _follow(chat, cid, stop_after=3)
    [_, assistant] = _saved(cid)
    assert assistant.status == MessageStatus.STOPPED and assistant.content
    assert assistant.stats is not None and assistant.stats["finish_reason"] == "stopped"
    assert assistant.stats["completion_tokens"] < 20
    assert "· stopped" in events[-1][1] and "· stopped" in chat.get(f"/chat/{cid}").text
    _post(chat, f"/chat/{cid}/send", {**GREEDY, "max_tokens": "4", "content": "Say hi."})
    _follow(chat, cid)
    assert _saved(cid)[-1].status == MessageStatus.DONE  # the same model answers the next turn
    gc.collect()
    assert unraisable == [] and "StreamContext" not in caplog.text


def test_regenerate_replaces_and_edit_rewinds(chat: TestClient) -> None:
    cid = _first(chat, {**GREEDY, "max_tokens": "4", "content": "Say hello."})
    _follow(chat, cid)
    first = _saved(cid)[1].created_at
    thread = _post(chat, f"/chat/{cid}/regenerate")
    # At once: the thread without the old reply, following the new turn, Send off until it ends.
    assert f'sse-connect="/chat/{cid}/events"' in thread and 'hx-swap-oob="true" disabled' not in thread
    assert 'id="send-button" form="chat-form" disabled' in " ".join(thread.split())
    _follow(chat, cid)
    messages = _saved(cid)
    assert len(messages) == 2 and messages[1].created_at > first  # replaced, not added
    # Without a script the form still works: the turn starts and the page shows it.
    plain = chat.post(
        f"/chat/{cid}/messages/1/edit", data={"content": "Say goodbye."}, follow_redirects=False
    )
    assert (plain.status_code, plain.headers["location"]) == (303, f"/chat/{cid}")
    _follow(chat, cid)
    assert [m.content for m in _saved(cid)] == ["Say goodbye.", _saved(cid)[1].content]
    assert len(_saved(cid)) == 2


def test_manual_mode_waits_for_the_typed_result(chat: TestClient) -> None:
    tools = json.dumps(
        [
            {
                "name": "get_weather",
                "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
            }
        ]
    )
    form = {
        **GREEDY,
        "max_tokens": "24",  # the call fits; the reply after the typed result needs only to start
        "content": "Weather in Paris?",
        "tools_json": tools,
        "tool_choice": "required",
        "agent_mode": "manual",
    }
    cid = _first(chat, form)
    done = _follow(chat, cid)[-1][1]
    assert "Waiting for the tool results you type." in done and 'name="tool_call_id"' in done
    call = (_saved(cid)[1].tool_calls or [])[0]
    _turn(chat, cid, f"/chat/{cid}/tool-result", {"tool_call_id": call["id"], "content": "18 °C, sunny"})
    assert [m.role for m in _saved(cid)][:4] == ["user", "assistant", "tool", "assistant"]
    assert _saved(cid)[2].content == "18 °C, sunny"


def test_bad_controls_are_refused_with_what_to_fix(chat: TestClient) -> None:
    response = chat.post("/chat/send", data={**GREEDY, "temperature": "hot", "content": "x"})
    assert response.status_code == 400 and "Temperature must be a number" in response.text
    assert _conversations() == 0  # a refused first message creates nothing
    cid = _first(chat, {**GREEDY, "max_tokens": "2", "content": "Hi"})
    _follow(chat, cid)
    bad_tools = {**GREEDY, "content": "kept draft", "tools_json": "[{"}
    response = chat.post(f"/chat/{cid}/send", data=bad_tools)
    assert response.status_code == 400 and "Tool editor" in response.text and "kept draft" in response.text
    assert len(_saved(cid)) == 2  # nothing stored for a refused request


def test_model_output_with_markup_is_shown_as_text(chat: TestClient) -> None:
    from mlx_manager.services.conversations import add_message, create_conversation

    with Session(get_engine()) as session:
        conversation = create_conversation(session, model_id="smol")
        cid = conversation.id
        assert cid is not None
        add_message(session, conversation, "user", "<script>alert(1)</script>")
        reply = 'Hi <script>alert(2)</script> <img src=x onerror="alert(3)">'
        # Stats as an older version (or an interrupted reply) saved them: only some figures.
        add_message(session, conversation, "assistant", reply, stats={"tokens_per_s": 9.5})
    page = chat.get(f"/chat/{cid}").text
    assert "<script>alert" not in page and "<img src=x" not in page
    assert "&lt;script&gt;alert(2)&lt;/script&gt;" in page and "&lt;img src=x onerror" in page
    assert "9.5 tok/s" in page


def test_export_markdown_and_json_and_delete(chat: TestClient) -> None:
    cid = _first(chat, {**GREEDY, "max_tokens": "4", "content": "Say hello."})
    _follow(chat, cid)
    markdown = chat.get(f"/chat/{cid}/export.md")
    assert (
        markdown.headers["content-disposition"].endswith(f'chat-{cid}.md"')
        and "## User\n\nSay hello." in markdown.text
    )
    exported = chat.get(f"/chat/{cid}/export.json").json()
    assert exported["title"] == "Say hello." and [m["role"] for m in exported["messages"]] == [
        "user",
        "assistant",
    ]
    chat.post(f"/chat/{cid}/rename", data={"title": "Greetings"})
    assert "Greetings" in chat.get(f"/chat/{cid}").text
    chat.post(f"/chat/{cid}/delete")
    assert chat.get(f"/chat/{cid}").status_code == 404 and _saved(cid) == []


def test_a_preset_saved_from_a_new_chat_is_listed_without_creating_a_chat(chat: TestClient) -> None:
    page = chat.get("/chat").text
    assert 'name="conversation_id" value=""' in page  # no conversation yet
    saved = chat.post(
        "/chat/presets", data={"name": "Pirate", "text": "Talk like a pirate.", "conversation_id": ""}
    )
    assert saved.status_code == 200 and "Pirate" in saved.text and "Talk like a pirate." in saved.text
    assert _conversations() == 0
