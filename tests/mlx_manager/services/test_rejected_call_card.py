"""A call the server rejected shows in the playground as a "rejected call" card with its reason,
and the mark stays out of what the model is sent back (the reason goes as the call's result)."""

from __future__ import annotations

from fastapi.testclient import TestClient
from sqlmodel import Session

from mlx_manager.services.conversations import (
    add_message,
    create_conversation,
    messages_of,
    pipeline_messages,
)
from mlx_server.database import get_engine

REASON = "'tool_name' is not a declared tool"
CALL = {"id": "call_1", "type": "function", "function": {"name": "tool_name", "arguments": "{}"}}


def test_a_rejected_call_gets_its_card_and_stays_out_of_the_history(client: TestClient) -> None:
    with Session(get_engine()) as session:
        conversation = create_conversation(session, model_id=None)
        add_message(session, conversation, "user", "hi")
        add_message(session, conversation, "assistant", "", tool_calls=[{**CALL, "rejected": REASON}])
        add_message(
            session, conversation, "tool", "Error: the call to tool_name was not run", tool_call_id="call_1"
        )
        sent = pipeline_messages(conversation, messages_of(session, conversation.id or 0))
        page = client.get(f"/chat/{conversation.id}")
    assert sent[1].as_openai()["tool_calls"] == [CALL]
    assert page.status_code == 200
    assert "rejected call" in page.text and "Not run: &#39;tool_name&#39; is not a declared tool" in page.text
