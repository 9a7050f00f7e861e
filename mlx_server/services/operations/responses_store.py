"""Stored Responses API responses: saved when `store` is true (OpenAI's default), read back by
`previous_response_id`, GET /v1/responses/{id} and its input_items, deleted on request, and
pruned with the audit log's retention (the same setting: a stored response is a record of a
request as much as its audit row is) by a scheduled job (see `mlx_server.main`).
"""

from __future__ import annotations

import logging
from functools import partial
from typing import Any, Literal

from sqlmodel import Session, col, delete

from mlx_server.database import background_session
from mlx_server.errors import APIError
from mlx_server.records import StoredResponse
from mlx_server.services.operations.audit import delete_older_than, prune_by_retention

logger = logging.getLogger("mlx_server.responses")

Item = dict[str, Any]
WHY_MISSING = "it was never stored (store: false), was deleted, or is older than the retention"


def save_response(
    body: dict[str, Any], *, history: list[Item], input_items: list[Item], previous_response_id: str | None
) -> None:
    record = StoredResponse(
        id=body["id"],
        model=body["model"],
        previous_response_id=previous_response_id,
        history=history,
        input_items=input_items,
        body=body,
    )
    with background_session() as session:  # at the end of a reply, streamed or not
        session.add(record)
        session.commit()


def stored_response(session: Session, response_id: str) -> StoredResponse:
    """The stored response, or a 404 saying why it may be missing."""
    record = session.get(StoredResponse, response_id)
    if record is None:
        message = f"No stored response with id {response_id!r}: {WHY_MISSING}."
        raise APIError(404, message, code="response_not_found")
    return record


def conversation_after(previous_response_id: str) -> list[Item]:
    """The items a continuation starts from: the previous response's own conversation, input
    and output. An unknown id is a 400 on the parameter, as OpenAI answers it."""
    with background_session() as session:  # the pipeline's, as the reply starts
        record = session.get(StoredResponse, previous_response_id)
    if record is None:
        message = f"Previous response with id {previous_response_id!r} not found: {WHY_MISSING}."
        raise APIError(400, message, param="previous_response_id", code="previous_response_not_found")
    return [*record.history, *record.input_items, *record.body.get("output", [])]


def delete_response(session: Session, response_id: str) -> dict[str, Any]:
    stored_response(session, response_id)
    session.exec(delete(StoredResponse).where(col(StoredResponse.id) == response_id))
    session.commit()
    return {"id": response_id, "object": "response", "deleted": True}


def input_items_page(
    session: Session, response_id: str, *, limit: int, order: Literal["asc", "desc"], after: str | None
) -> dict[str, Any]:
    """OpenAI's list of a response's input items: `limit` of them in `order`, after the item `after`."""
    items = list(stored_response(session, response_id).input_items)
    if order == "desc":
        items.reverse()
    if after is not None:
        ids = [item.get("id") for item in items]
        if after not in ids:
            raise APIError(
                400, f"No input item with id {after!r} in response {response_id!r}.", param="after"
            )
        items = items[ids.index(after) + 1 :]
    page = items[:limit]
    return {
        "object": "list",
        "data": page,
        "first_id": page[0]["id"] if page else None,
        "last_id": page[-1]["id"] if page else None,
        "has_more": len(items) > limit,
    }


def prune_expired_responses() -> int:
    """The retention job: the audit log's retention in force; failures are logged, not raised."""
    return prune_by_retention("stored responses", partial(delete_older_than, StoredResponse))
