"""The parts of remote routing that need no upstream: the breaker's states, where a model id is
routed, and a chat in OpenAI's message format as an Anthropic Messages request."""

from __future__ import annotations

import asyncio
import time

import pytest
from sqlmodel import Session

from mlx_server.errors import APIError
from mlx_server.records import BackendKind
from mlx_server.schemas.openai import ChatMessage
from mlx_server.services.pipeline.engine.params import GenerationParams
from mlx_server.services.pipeline.protocols.openai_request import chat_messages, chat_tools
from mlx_server.services.pipeline.request import GenerationRequest, ToolChoice
from mlx_server.services.remote.anthropic_upstream import messages_body
from mlx_server.services.remote.backends import BackendIn, RuleIn, route_targets, save_backend, save_rule
from mlx_server.services.remote.breaker import CircuitBreaker


def _state(circuit: CircuitBreaker) -> str:
    return circuit.state.value


def test_breaker_opens_after_the_failures_and_lets_one_probe_through_after_the_cooldown(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("MLX_SERVER_REMOTE_BREAKER_FAILURES", "2")
    monkeypatch.setenv("MLX_SERVER_REMOTE_BREAKER_COOLDOWN_SECONDS", "0.2")
    circuit = CircuitBreaker()
    circuit.failed("one")
    assert _state(circuit) == "closed" and circuit.try_acquire()
    circuit.failed("two")
    assert _state(circuit) == "open" and not circuit.try_acquire()
    assert 0 < circuit.retry_after() <= 0.2
    time.sleep(0.25)
    assert _state(circuit) == "half-open"
    assert circuit.try_acquire() and not circuit.try_acquire()  # one probe at a time
    circuit.failed("probe failed")  # a failed probe opens it again at once
    assert _state(circuit) == "open" and circuit.status()["last_error"] == "probe failed"
    time.sleep(0.25)
    assert circuit.try_acquire()
    circuit.abandoned()  # the probe was cancelled: the next request probes instead
    assert circuit.try_acquire()
    circuit.succeeded()
    assert _state(circuit) == "closed" and circuit.status()["consecutive_failures"] == 0


def test_rules_decide_in_order_then_a_backend_prefix_else_the_local_path(session: Session) -> None:
    for name in ("big", "cloud"):
        backend = BackendIn(name=name, kind=BackendKind.OPENAI, base_url="http://127.0.0.1:9/v1")
        asyncio.run(save_backend(session, backend))
    save_rule(
        session, RuleIn.model_validate({"pattern": "gpt-*", "targets": [{"backend": "cloud", "model": "x"}]})
    )
    save_rule(
        session,
        RuleIn.model_validate(
            {
                "pattern": "gpt-4*",
                "position": -1,
                "targets": [{"backend": "big", "model": "y"}, {"model": "smol"}],
            }
        ),
    )
    assert [(t.backend, t.model) for t in route_targets(session, "gpt-4o") or []] == [
        ("big", "y"),
        (None, "smol"),
    ]
    assert [(t.backend, t.model) for t in route_targets(session, "gpt-3.5") or []] == [("cloud", "x")]
    assert [(t.backend, t.model) for t in route_targets(session, "big/qwen3") or []] == [("big", "qwen3")]
    assert route_targets(session, "mlx-community/SmolLM2") is None
    assert route_targets(session, "smol") is None
    with pytest.raises(APIError, match=r"Unknown backends \['nope'\]"):
        save_rule(
            session, RuleIn.model_validate({"pattern": "a", "targets": [{"backend": "nope", "model": "m"}]})
        )


def test_an_openai_format_chat_becomes_anthropic_turns() -> None:
    request = GenerationRequest(
        model="any",
        params=GenerationParams(max_tokens=20, stop=["END"]),
        messages=chat_messages(
            [
                ChatMessage.model_validate(m)
                for m in [
                    {"role": "system", "content": "Be brief."},
                    {
                        "role": "user",
                        "content": [
                            {"type": "text", "text": "Weather?"},
                            {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
                        ],
                    },
                    {
                        "role": "assistant",
                        "content": None,
                        "tool_calls": [
                            {
                                "id": "c1",
                                "type": "function",
                                "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
                            }
                        ],
                    },
                    {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
                ]
            ]
        ),
        tools=chat_tools(
            [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]
        ),
        tool_choice=ToolChoice.named("get_weather"),
    )
    body = messages_body(request, "claude-x")
    assert body["system"] == "Be brief." and body["max_tokens"] == 20 and body["stop_sequences"] == ["END"]
    assert [t["role"] for t in body["messages"]] == ["user", "assistant", "user"]
    assert body["messages"][0]["content"][1] == {
        "type": "image",
        "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"},
    }
    assert body["messages"][1]["content"] == [
        {"type": "tool_use", "id": "c1", "name": "get_weather", "input": {"city": "Paris"}}
    ]
    assert body["messages"][2]["content"] == [
        {"type": "tool_result", "tool_use_id": "c1", "content": "sunny"}
    ]
    assert body["tools"][0]["name"] == "get_weather" and body["tool_choice"] == {
        "type": "tool",
        "name": "get_weather",
    }
