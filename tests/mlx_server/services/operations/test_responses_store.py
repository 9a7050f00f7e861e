"""Stored Responses API responses in the real (migrated) database: continuation, input-item
pages, deletion, and pruning with the audit log's retention."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlmodel import Session

from mlx_server.errors import APIError
from mlx_server.records import StoredResponse, utcnow
from mlx_server.services.operations.audit import set_audit_retention
from mlx_server.services.operations.responses_store import (
    conversation_after,
    delete_response,
    input_items_page,
    prune_expired_responses,
    save_response,
    stored_response,
)

ITEMS = [{"id": f"msg_{n}", "type": "message", "role": "user", "content": f"turn {n}"} for n in range(5)]
OUTPUT = [{"id": "msg_out", "type": "message", "role": "assistant", "content": []}]


def _save(response_id: str) -> None:
    body = {"id": response_id, "model": "m", "output": OUTPUT}
    save_response(body, history=[{"id": "old"}], input_items=ITEMS, previous_response_id=None)


def test_a_continuation_starts_from_the_history_input_and_output(session: Session) -> None:
    _save("resp_1")
    assert conversation_after("resp_1") == [{"id": "old"}, *ITEMS, *OUTPUT]
    with pytest.raises(APIError) as caught:
        conversation_after("resp_missing")
    assert (caught.value.status, caught.value.param) == (400, "previous_response_id")


def test_input_items_come_in_pages_newest_first_by_default(session: Session) -> None:
    _save("resp_1")
    first = input_items_page(session, "resp_1", limit=2, order="desc", after=None)
    assert [item["id"] for item in first["data"]] == ["msg_4", "msg_3"] and first["has_more"]
    rest = input_items_page(session, "resp_1", limit=10, order="desc", after=first["last_id"])
    assert [item["id"] for item in rest["data"]] == ["msg_2", "msg_1", "msg_0"] and not rest["has_more"]
    assert input_items_page(session, "resp_1", limit=1, order="asc", after=None)["first_id"] == "msg_0"


def test_a_deleted_response_is_gone(session: Session) -> None:
    _save("resp_1")
    assert delete_response(session, "resp_1") == {"id": "resp_1", "object": "response", "deleted": True}
    with pytest.raises(APIError) as caught:
        stored_response(session, "resp_1")
    assert caught.value.status == 404


def test_responses_older_than_the_audit_retention_are_pruned(session: Session) -> None:
    _save("resp_new")
    session.add(
        StoredResponse(id="resp_old", model="m", created_at=utcnow() - timedelta(days=3), body={"output": []})
    )
    session.commit()
    set_audit_retention(session, 2)
    assert prune_expired_responses() == 1
    assert stored_response(session, "resp_new").id == "resp_new"
    with pytest.raises(APIError):
        stored_response(session, "resp_old")
