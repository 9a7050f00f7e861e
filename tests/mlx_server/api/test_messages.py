"""/v1/messages with the real anthropic SDK against `mlx-manager serve` and the real SmolLM2."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
import pytest

from mlx_server.models.store import DEFAULT_MODEL_ID
from tests.support import ServerProcess

MODEL = DEFAULT_MODEL_ID
FRANCE: list[Any] = [{"role": "user", "content": "What is the capital of France?"}]
WEATHER_TOOL: dict[str, Any] = {
    "name": "get_weather",
    "description": "Current weather for a city",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}
RECORDED = Path(__file__).parent / "data" / "claude_code_request.json"
# The anthropic SDK 2.x (API version 2026-10-21) has no sampling parameters; a local server
# still honours them, and clients send them in the body.
GREEDY: dict[str, Any] = {"extra_body": {"temperature": 0}}


def _text(message: Any) -> str:
    return "".join(block.text for block in message.content if block.type == "text")


def test_create_answers_with_a_text_block_usage_and_end_turn(claude: anthropic.Anthropic) -> None:
    message = claude.messages.create(
        model=MODEL, max_tokens=24, **GREEDY, system="Answer in one sentence.", messages=FRANCE
    )
    assert message.type == "message" and message.role == "assistant" and message.id.startswith("msg_")
    assert message.model == MODEL
    assert "Paris" in _text(message)
    assert message.stop_reason in ("end_turn", "max_tokens")
    assert message.usage.input_tokens > 10 and 0 < message.usage.output_tokens <= 24


def test_stream_events_rebuild_the_same_message_as_create(claude: anthropic.Anthropic) -> None:
    args: dict[str, Any] = {"model": MODEL, "max_tokens": 5, "messages": FRANCE, **GREEDY}
    created = claude.messages.create(**args)
    with claude.messages.stream(**args) as stream:
        deltas = [event.delta.text for event in stream if event.type == "content_block_delta"]  # type: ignore[union-attr]
        final = stream.get_final_message()
    assert _text(final) == _text(created) == "".join(deltas)
    assert final.stop_reason == created.stop_reason == "max_tokens"
    assert final.usage.output_tokens == created.usage.output_tokens == 5
    assert final.usage.input_tokens == created.usage.input_tokens


def test_raw_stream_is_anthropics_event_sequence(inference_server: ServerProcess) -> None:
    body = {"model": MODEL, "max_tokens": 4, "temperature": 0, "stream": True, "messages": FRANCE}
    headers = {"x-api-key": "sk-ant-local", "anthropic-version": "2023-06-01"}
    with httpx.stream(
        "POST", f"{inference_server.url}/v1/messages", json=body, headers=headers, timeout=60
    ) as reply:
        assert reply.status_code == 200
        lines = [line for line in reply.iter_lines() if line]
    names = [line.removeprefix("event: ") for line in lines if line.startswith("event: ")]
    payloads = [json.loads(line.removeprefix("data: ")) for line in lines if line.startswith("data: ")]
    assert names[0] == "message_start" and names[-2:] == ["message_delta", "message_stop"]
    assert "content_block_start" in names and names.index("content_block_start") < names.index(
        "content_block_stop"
    )
    assert [p["type"] for p in payloads] == names  # the `event:` field matches each payload's type
    assert payloads[0]["message"]["usage"]["input_tokens"] > 0
    assert (
        payloads[-2]["delta"]["stop_reason"] == "max_tokens" and payloads[-2]["usage"]["output_tokens"] == 4
    )


def test_forced_tool_use_then_a_tool_result_turn(claude: anthropic.Anthropic) -> None:
    question: list[Any] = [{"role": "user", "content": "What is the weather in Paris?"}]
    called = claude.messages.create(
        model=MODEL,
        max_tokens=48,
        **GREEDY,
        tools=[WEATHER_TOOL],  # type: ignore[list-item]
        tool_choice={"type": "any"},
        messages=question,
    )
    assert called.stop_reason == "tool_use"
    uses = [block for block in called.content if block.type == "tool_use"]
    assert uses and uses[0].name == "get_weather" and isinstance(uses[0].input, dict)
    assert isinstance(uses[0].input["city"], str)

    history = [
        *question,
        {"role": "assistant", "content": [block.model_dump() for block in called.content]},
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": uses[0].id, "content": "18 degrees and sunny"}
            ],
        },
    ]
    answered = claude.messages.create(
        model=MODEL,
        max_tokens=24,
        **GREEDY,
        tools=[WEATHER_TOOL],
        messages=history,  # type: ignore[list-item]
    )
    assert answered.stop_reason in ("end_turn", "max_tokens", "tool_use")
    assert answered.content and answered.usage.input_tokens > called.usage.input_tokens


def test_count_tokens_matches_the_prompt_the_model_reads(claude: anthropic.Anthropic) -> None:
    args: dict[str, Any] = {"model": MODEL, "system": "Be brief.", "messages": FRANCE}
    counted = claude.messages.count_tokens(**args)
    created = claude.messages.create(max_tokens=1, **GREEDY, **args)
    assert counted.input_tokens == created.usage.input_tokens
    # A system message inside `messages` (newer Claude Code) is the same system prompt.
    inline = claude.messages.count_tokens(
        model=MODEL, messages=[{"role": "system", "content": "Be brief."}, *FRANCE]
    )  # type: ignore[list-item]
    assert inline.input_tokens == counted.input_tokens
    with_tools = claude.messages.count_tokens(tools=[WEATHER_TOOL], **args)  # type: ignore[list-item]
    assert with_tools.input_tokens > counted.input_tokens + 20


def test_unknown_model_and_invalid_requests_are_anthropic_errors(
    claude: anthropic.Anthropic, inference_server: ServerProcess
) -> None:
    with pytest.raises(anthropic.NotFoundError) as missing:
        claude.messages.create(model="no-such-model", max_tokens=5, messages=FRANCE)
    assert missing.value.body["error"]["type"] == "not_found_error"  # type: ignore[index]
    with pytest.raises(anthropic.BadRequestError) as hot:
        claude.messages.create(model=MODEL, max_tokens=5, messages=FRANCE, extra_body={"temperature": 1.5})
    assert "temperature" in hot.value.body["error"]["message"]  # type: ignore[index]

    reply = httpx.post(
        f"{inference_server.url}/v1/messages", json={"model": MODEL, "messages": FRANCE}, timeout=30
    )
    assert reply.status_code == 400
    body = reply.json()
    assert body["type"] == "error" and body["error"]["type"] == "invalid_request_error"
    assert "max_tokens" in body["error"]["message"]
    bad_block = {
        "model": MODEL,
        "max_tokens": 5,
        "messages": [{"role": "user", "content": [{"type": "video"}]}],
    }
    reply = httpx.post(f"{inference_server.url}/v1/messages", json=bad_block, timeout=30)
    assert reply.status_code == 400 and "video" in reply.json()["error"]["message"]


def test_aliases_and_coding_agent_shapes_land_on_the_local_model(
    claude: anthropic.Anthropic, inference_server: ServerProcess
) -> None:
    """A Claude model name, a huge max_tokens, a system message in `messages` and a signed
    thinking block in the history: all accepted, the reply comes from SmolLM2."""
    message = claude.messages.create(
        model="claude-haiku-4-5",
        max_tokens=64000,  # beyond SmolLM2's 8k context: a ceiling, lowered to what fits
        **GREEDY,
        stop_sequences=["."],
        messages=[
            {"role": "system", "content": "Answer in one sentence."},
            {"role": "user", "content": "Hi"},
            {
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": "Greet back.", "signature": "EqQBCkYIBxgCKkDx0"},
                    {"type": "text", "text": "Hello!"},
                ],
            },
            *FRANCE,
        ],
    )
    assert message.model == MODEL
    assert message.stop_reason == "stop_sequence" and message.stop_sequence == "."
    assert "Paris" in _text(message) and not _text(message).endswith(".")
    rows: list[dict[str, Any]] = []
    deadline = time.monotonic() + 10  # audit rows are written by a background thread
    while not rows and time.monotonic() < deadline:
        query = {"endpoint": "POST /v1/messages", "status": 200, "limit": 50}
        rows = httpx.get(f"{inference_server.url}/v1/admin/audit", params=query, timeout=10).json()["data"]
        time.sleep(0.2)
    assert rows and all(r["protocol"] == "anthropic" and r["model"] == MODEL for r in rows)


def test_recorded_claude_code_request_streams_to_completion(claude: anthropic.Anthropic) -> None:
    request = json.loads(RECORDED.read_text())
    # The recording asks for 32000 tokens at temperature 1; a 135M model may ramble for
    # minutes before it ends its turn, so the test bounds the reply (the ceiling is tested above).
    request["max_tokens"] = 16
    request.pop("stream")
    request["extra_body"] = {"temperature": request.pop("temperature")}
    with claude.messages.stream(**request) as stream:
        kinds = [event.type for event in stream]
        final = stream.get_final_message()
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop"
    assert final.model == MODEL and final.stop_reason in ("end_turn", "max_tokens", "tool_use")
    assert final.content and final.usage.output_tokens > 0
    assert (
        final.usage.input_tokens > 300
    )  # system blocks, five tools and the tool history all reached the prompt


def test_same_conversation_same_text_through_both_protocols(
    claude: anthropic.Anthropic, oai: openai.OpenAI
) -> None:
    system = "You are a geography teacher."
    anthropic_reply = claude.messages.create(
        model=MODEL, max_tokens=16, **GREEDY, system=system, messages=FRANCE
    )
    openai_reply = oai.chat.completions.create(
        model=MODEL, max_tokens=16, **GREEDY, messages=[{"role": "system", "content": system}, *FRANCE]
    )
    assert _text(anthropic_reply) == openai_reply.choices[0].message.content
    assert anthropic_reply.usage.input_tokens == openai_reply.usage.prompt_tokens  # type: ignore[union-attr]
