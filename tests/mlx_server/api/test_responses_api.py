"""The Responses API with the real openai SDK against the session's server and SmolLM2:
create, stream (the SDK's accumulator against the final and the stored response), a function
tool then its output continued by previous_response_id, json_schema output, the stored
responses (retrieve, input_items, delete), the audit rows, and bad input as OpenAI's errors."""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import openai
import pytest
from jsonschema import Draft202012Validator

from mlx_server.models.store import DEFAULT_MODEL_ID
from tests.support import ServerProcess

MODEL = DEFAULT_MODEL_ID
YES_NO: Any = {
    "type": "json_schema",
    "name": "answer",
    "schema": {
        "type": "object",
        "properties": {"answer": {"enum": ["yes", "no"]}},
        "required": ["answer"],
        "additionalProperties": False,
    },
    "strict": True,
}
WEATHER: Any = {
    "type": "function",
    "name": "get_weather",
    "description": "Current weather for a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}


def _audit_row(server: ServerProcess, request_id: str) -> dict[str, Any]:
    deadline = time.monotonic() + 10  # rows are written off the response path
    while time.monotonic() < deadline:
        page = httpx.get(f"{server.url}/v1/admin/audit", params={"limit": 50}, timeout=10).json()
        rows: list[dict[str, Any]] = [row for row in page["data"] if row["request_id"] == request_id]
        if rows:
            return rows[0]
        time.sleep(0.1)
    raise AssertionError(f"no audit row for {request_id}")


def test_create_is_stored_listed_audited_and_deleted(
    oai: openai.OpenAI, inference_server: ServerProcess
) -> None:
    raw = oai.responses.with_raw_response.create(
        model=MODEL, input="Say hello.", max_output_tokens=6, temperature=0, metadata={"run": "t1"}
    )
    response = raw.parse()
    assert response.object == "response" and response.model == MODEL
    assert [item.type for item in response.output] == ["message"] and response.output_text
    assert response.status == "incomplete" and response.incomplete_details is not None
    assert response.incomplete_details.reason == "max_output_tokens"
    assert response.usage is not None and response.usage.output_tokens == 6
    assert response.usage.input_tokens > 0 and response.metadata == {"run": "t1"}

    assert oai.responses.retrieve(response.id).model_dump() == response.model_dump()
    items = list(oai.responses.input_items.list(response.id))
    assert len(items) == 1 and items[0].type == "message" and items[0].id
    assert [part.model_dump(include={"type", "text"}) for part in items[0].content] == [
        {"type": "input_text", "text": "Say hello."}
    ]
    row = _audit_row(inference_server, raw.headers["x-request-id"])
    assert (row["endpoint"], row["protocol"], row["model"]) == ("POST /v1/responses", "responses", MODEL)
    assert row["completion_tokens"] == 6

    oai.responses.delete(response.id)
    with pytest.raises(openai.NotFoundError):
        oai.responses.retrieve(response.id)


def test_stream_accumulates_to_the_final_and_the_stored_response(oai: openai.OpenAI) -> None:
    with oai.responses.stream(
        model=MODEL, input="Is the sky blue?", text={"format": YES_NO}, max_output_tokens=20, temperature=0
    ) as stream:
        events = list(stream)
        final = stream.get_final_response()
    numbers = [event.sequence_number for event in events]
    assert numbers == list(range(len(events)))
    kinds = [event.type for event in events]
    assert kinds[:4] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
    ]
    assert kinds[-4:] == [
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    # The SDK's snapshot built from the deltas is the final text, and the final response is the stored one.
    snapshots = [event.snapshot for event in events if event.type == "response.output_text.delta"]
    assert snapshots and snapshots[-1] == final.output_text
    assert json.loads(final.output_text)["answer"] in ("yes", "no")
    done = [event.item for event in events if event.type == "response.output_item.done"]
    stored = oai.responses.retrieve(final.id)
    assert [item.model_dump() for item in done] == [item.model_dump() for item in stored.output]
    assert stored.output_text == final.output_text and stored.usage == final.usage


def test_required_function_call_then_its_output_continues_the_conversation(oai: openai.OpenAI) -> None:
    first = oai.responses.create(
        model=MODEL,
        input="What is the weather in Paris?",
        tools=[WEATHER],
        tool_choice="required",
        max_output_tokens=30,
        temperature=0,
    )
    calls = [item for item in first.output if item.type == "function_call"]
    assert first.status == "completed" and len(calls) == 1
    call = calls[0]
    assert call.name == "get_weather" and call.call_id and "city" in json.loads(call.arguments)

    second = oai.responses.create(
        model=MODEL,
        previous_response_id=first.id,
        input=[{"type": "function_call_output", "call_id": call.call_id, "output": "18 degrees and sunny"}],
        max_output_tokens=8,
        temperature=0,
    )
    assert second.previous_response_id == first.id and second.output_text.strip()
    # Its call_id is known only from the previous response: without it, this input is a 400.
    items = list(oai.responses.input_items.list(second.id))
    assert [item.type for item in items] == ["function_call_output"]


def test_json_schema_replies_are_valid_twenty_of_twenty(oai: openai.OpenAI) -> None:
    # One prompt (its prefill cached after the first) sampled at temperature 1: twenty replies
    # from the grammar text.format compiles, each checked against the schema.
    def ask(_: int) -> openai.types.responses.Response:
        return oai.responses.create(
            model=MODEL, input="Is it raining?", text={"format": YES_NO}, max_output_tokens=12, store=False
        )

    with ThreadPoolExecutor(4) as pool:
        replies = list(pool.map(ask, range(20)))
    validator = Draft202012Validator(YES_NO["schema"])
    valid = [r for r in replies if r.status == "completed" and validator.is_valid(json.loads(r.output_text))]
    assert len(valid) == 20, [r.output_text for r in replies if r not in valid]
    with pytest.raises(openai.NotFoundError):  # store: false
        oai.responses.retrieve(replies[0].id)


@pytest.mark.parametrize(
    ("body", "status", "param"),
    [
        ({"input": [{"type": "item_reference", "id": "x"}]}, 400, "input[0]"),
        (
            {"input": [{"type": "function_call_output", "call_id": "nope", "output": "1"}]},
            400,
            "input[0].call_id",
        ),
        ({"input": "hi", "previous_response_id": "resp_missing"}, 400, "previous_response_id"),
        ({"input": "hi", "tools": [{"type": "web_search"}]}, 400, "tools"),
        ({"input": "hi", "tool_choice": "required"}, 400, "tool_choice"),
        ({"input": "hi", "model": "no-such-model"}, 404, "model"),
    ],
)
def test_bad_requests_are_openai_errors_naming_the_field(
    inference_server: ServerProcess, body: dict[str, Any], status: int, param: str
) -> None:
    reply = httpx.post(f"{inference_server.url}/v1/responses", json={"model": MODEL, **body}, timeout=30)
    assert reply.status_code == status
    error = reply.json()["error"]
    assert error["param"] == param and error["message"] and error["type"]


def test_unknown_stored_responses_are_404s(oai: openai.OpenAI) -> None:
    with pytest.raises(openai.NotFoundError, match="resp_missing"):
        oai.responses.retrieve("resp_missing")
    with pytest.raises(openai.NotFoundError):
        oai.responses.delete("resp_missing")
    with pytest.raises(openai.NotFoundError):
        oai.responses.input_items.list("resp_missing").data  # noqa: B018
