"""The playground's event stream with the real SmolLM2: order, reasoning, tool calls and the
agent loop, stop, regenerate, edit, manual tool results, persistence and export."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlmodel import Session

from mlx_manager.records import ChatMessage
from mlx_manager.services.chat_tools import execute_tool
from mlx_server.database import get_engine, upgrade_database
from mlx_server.records import ModelCapabilities, ModelRecord, ModelSource
from tests.support import csrf_headers

STREAM = {"Accept": "text/event-stream"}
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
    shutil.copytree(smollm_dir, thinking_dir)
    config_path = thinking_dir / "tokenizer_config.json"
    config = json.loads(config_path.read_text())
    config["chat_template"] = THINKING_TEMPLATE
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


def _new(client: TestClient, model: str = "smol") -> int:
    response = client.post("/chat/new", data={"model_id": model}, follow_redirects=False)
    return int(response.headers["location"].rsplit("/", 1)[1])


def _events(
    client: TestClient, url: str, form: dict[str, Any], stop_after: int | None = None
) -> list[tuple[str, Any]]:
    events: list[tuple[str, Any]] = []
    name = ""
    with client.stream("POST", url, data=form, headers=STREAM) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        for line in response.iter_lines():
            if line.startswith("event:"):
                name = line.removeprefix("event:").strip()
            elif line.startswith("data:"):
                events.append((name, json.loads(line.removeprefix("data:").strip())))
                if stop_after is not None and sum(n == "content" for n, _ in events) == stop_after:
                    client.post(url.rsplit("/", 1)[0] + "/stop", headers={"Accept": "application/json"})
                    stop_after = None
    return events


def _saved(conversation_id: int) -> list[ChatMessage]:
    from mlx_manager.services.conversations import messages_of

    with Session(get_engine()) as session:
        return messages_of(session, conversation_id)


def test_a_reply_streams_in_order_and_is_saved_with_its_stats(chat: TestClient) -> None:
    cid = _new(chat)
    events = _events(chat, f"/chat/{cid}/send", {**GREEDY, "content": "What is the capital of France?"})
    names = [n for n, _ in events]
    assert names[0] == "user" and names[-1] == "done"
    assert (
        names.index("assistant_start")
        < names.index("content")
        < names.index("stats")
        < names.index("message")
    )
    assert any(n == "status" and "Loading smol" in d["text"] for n, d in events)  # the first use loads it
    text = "".join(d["text"] for n, d in events if n == "content")
    stats = next(d for n, d in events if n == "stats")
    assert stats["completion_tokens"] > 0 and stats["prompt_tokens"] > 0 and stats["tokens_per_s"] > 0
    assert stats["ttft_s"] > 0
    user, assistant = _saved(cid)
    assert (user.role, user.content) == ("user", "What is the capital of France?")
    assert assistant.content == text and "Paris" in text
    page = chat.get(f"/chat/{cid}").text  # reloading shows the conversation as it was
    assert "What is the capital of France?" in page and "Paris" in page and "tok/s" in page


def test_reasoning_is_streamed_apart_from_content(chat: TestClient) -> None:
    cid = _new(chat, "smol-think")
    events = _events(chat, f"/chat/{cid}/send", {**GREEDY, "model_id": "smol-think", "content": "Hi"})
    reasoning = "".join(d["text"] for n, d in events if n == "reasoning")
    assert reasoning.strip()
    assert "<think>" not in reasoning and all("<think>" not in d["text"] for n, d in events if n == "content")
    [_, assistant] = _saved(cid)
    assert assistant.reasoning == reasoning.strip()
    assert 'class="reasoning"' in chat.get(f"/chat/{cid}").text


def test_required_calculator_call_runs_and_the_model_answers_at_max_depth(chat: TestClient) -> None:
    """One tool round (max depth 1): the call, its result fed back, then a reply without tools."""
    cid = _new(chat)
    form = {
        **GREEDY,
        "max_tokens": "40",
        "content": "What is 12 times 7?",
        "builtin_tools": "calculator",
        "tool_choice": "required",
        "max_depth": "1",
    }
    events = _events(chat, f"/chat/{cid}/send", form)
    names = [n for n, _ in events]
    call = next(d for n, d in events if n == "tool_call")
    assert call["function"]["name"] == "calculator" and "expression" in json.loads(
        call["function"]["arguments"]
    )
    result = next(d for n, d in events if n == "tool_result")
    assert result["tool_call_id"] == call["id"] and "tool-result" in result["html"]
    assert names.count("assistant_start") == 2
    assert any(n == "status" and "maximum depth" in d["text"] for n, d in events)
    messages = _saved(cid)
    assert [m.role for m in messages] == ["user", "assistant", "tool", "assistant"]
    assert not messages[3].tool_calls and messages[3].content  # it answered in words
    # What the calculator made of the model's expression (a 135M model's arithmetic is not the point).
    expected = execute_tool("calculator", call["function"]["arguments"]).content
    assert messages[2].tool_call_id == call["id"] and messages[2].content == expected
    page = chat.get(f"/chat/{cid}").text
    assert 'class="tool-card"' in page and "calculator" in page


def test_stop_ends_the_generation_server_side(chat: TestClient) -> None:
    cid = _new(chat)
    form = {**GREEDY, "max_tokens": "200", "content": "Write a long story about a dragon."}
    events = _events(chat, f"/chat/{cid}/send", form, stop_after=3)
    assert [n for n, _ in events][-1] == "done"
    [_, assistant] = _saved(cid)
    assert assistant.stats is not None and assistant.stats["finish_reason"] == "stopped"
    assert assistant.stats["completion_tokens"] < 20


def test_regenerate_replaces_and_edit_rewinds(chat: TestClient) -> None:
    cid = _new(chat)
    _events(chat, f"/chat/{cid}/send", {**GREEDY, "max_tokens": "4", "content": "Say hello."})
    first = _saved(cid)[1].created_at
    events = _events(chat, f"/chat/{cid}/regenerate", {})
    assert events[0] == ("rewind", {"position": 2}) and "message" in [n for n, _ in events]
    messages = _saved(cid)
    assert len(messages) == 2 and messages[1].created_at > first  # replaced, not added
    edited = _events(chat, f"/chat/{cid}/messages/1/edit", {"content": "Say goodbye."})
    assert edited[0] == ("rewind", {"position": 1}) and edited[1][0] == "user"
    assert [m.content for m in _saved(cid)] == ["Say goodbye.", _saved(cid)[1].content]


def test_manual_mode_waits_for_the_typed_result(chat: TestClient) -> None:
    cid = _new(chat)
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
        "max_tokens": "30",
        "content": "Weather in Paris?",
        "tools_json": tools,
        "tool_choice": "required",
        "agent_mode": "manual",
    }
    events = _events(chat, f"/chat/{cid}/send", form)
    call = next(d for n, d in events if n == "tool_call")
    assert any(n == "status" and "Waiting" in d["text"] for n, d in events)
    assert (
        'name="tool_call_id"' in next(d for n, d in events if n == "message")["html"]
    )  # the form to type it
    resumed = _events(
        chat, f"/chat/{cid}/tool-result", {"tool_call_id": call["id"], "content": "18 °C, sunny"}
    )
    assert resumed[0][0] == "tool_result" and "assistant_start" in [n for n, _ in resumed]
    assert [m.role for m in _saved(cid)][:3] == ["user", "assistant", "tool"]


def test_bad_controls_are_refused_with_what_to_fix(chat: TestClient) -> None:
    cid = _new(chat)
    response = chat.post(f"/chat/{cid}/send", data={**GREEDY, "temperature": "hot", "content": "x"})
    assert response.status_code == 400 and "Temperature must be a number" in response.text
    bad_tools = {**GREEDY, "content": "x", "tools_json": "[{"}
    response = chat.post(f"/chat/{cid}/send", data=bad_tools)
    assert response.status_code == 400 and "Tool editor" in response.text
    assert _saved(cid) == []  # nothing stored for a refused request


def test_model_output_with_markup_is_shown_as_text(chat: TestClient) -> None:
    from mlx_manager.services.conversations import add_message, get_conversation

    cid = _new(chat)
    with Session(get_engine()) as session:
        conversation = get_conversation(session, cid)
        assert conversation is not None
        add_message(session, conversation, "user", "<script>alert(1)</script>")
        reply = 'Hi <script>alert(2)</script> <img src=x onerror="alert(3)">'
        # Stats as an older version (or an interrupted reply) saved them: only some figures.
        add_message(session, conversation, "assistant", reply, stats={"tokens_per_s": 9.5})
    page = chat.get(f"/chat/{cid}").text
    assert "<script>alert" not in page and "<img src=x" not in page
    assert "&lt;script&gt;alert(2)&lt;/script&gt;" in page and "&lt;img src=x onerror" in page
    assert "9.5 tok/s" in page


def test_export_markdown_and_json_and_delete(chat: TestClient) -> None:
    cid = _new(chat)
    _events(chat, f"/chat/{cid}/send", {**GREEDY, "max_tokens": "4", "content": "Say hello."})
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
