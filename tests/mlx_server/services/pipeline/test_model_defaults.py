"""A model's defaults: parsed and checked as the command line and the API give them, and
applied to what a request leaves out (and only that)."""

from __future__ import annotations

from typing import Any

import pytest

from mlx_server.models.defaults import ModelDefaults, ModelDefaultsError, parse_assignments
from mlx_server.schemas.openai import ChatMessage
from mlx_server.services.pipeline.engine.params import GenerationParams, SamplingParams
from mlx_server.services.pipeline.model_defaults import with_model_defaults, without_oldest_turn
from mlx_server.services.pipeline.protocols.openai_request import chat_messages
from mlx_server.services.pipeline.request import GenerationRequest, Message

DEFAULTS = ModelDefaults(temperature=0.0, top_k=20, max_tokens=64, system_prompt="Be brief.", thinking=False)
HELLO = [{"role": "user", "content": "Hello"}]


def typed(messages: list[dict[str, Any]]) -> tuple[Message, ...]:
    return chat_messages([ChatMessage.model_validate(message) for message in messages])


def test_command_line_assignments_are_typed_checked_and_cleared() -> None:
    changes = parse_assignments(
        ["temperature=0.2", "context-length=4096", "thinking=false", "system_prompt=Be kind."]
    )
    defaults = ModelDefaults().changed(changes)
    assert (defaults.temperature, defaults.context_length, defaults.thinking) == (0.2, 4096, False)
    assert defaults.system_prompt == "Be kind."
    cleared = defaults.changed(parse_assignments(["temperature=", "thinking=default"]))
    assert cleared.temperature is None and cleared.thinking is None and cleared.context_length == 4096
    assert cleared.stored() == {"context_length": 4096, "system_prompt": "Be kind."}


@pytest.mark.parametrize(
    ("words", "message"),
    [
        (["temprature=0.2"], "There is no default 'temprature'; the keys are: context_length"),
        (["temperature"], "is not KEY=VALUE"),
        (["temperature=hot"], "temperature:"),
        (["top_p=1.5"], "top_p: Input should be less than or equal to 1"),
        (["context_overflow=drop"], "context_overflow:"),
    ],
)
def test_bad_assignments_name_the_key(words: list[str], message: str) -> None:
    with pytest.raises(ModelDefaultsError, match=message):
        ModelDefaults().changed(parse_assignments(words))


def test_stored_values_this_version_cannot_read_are_dropped_not_fatal() -> None:
    stored = {"temperature": 0.5, "top_p": 7, "unknown_key": 1}
    assert ModelDefaults.from_stored(stored) == ModelDefaults(temperature=0.5)
    assert ModelDefaults.from_stored(None) == ModelDefaults()


def test_defaults_fill_only_what_the_request_left_out() -> None:
    left_out = GenerationParams(
        sampling=SamplingParams(temperature=1.0, top_k=5), defaultable=frozenset({"temperature"})
    )
    request = GenerationRequest(model="m", params=left_out, messages=typed(HELLO))
    applied = with_model_defaults(request, DEFAULTS)
    assert applied.params.sampling.temperature == 0.0  # left out: the model's
    assert applied.params.sampling.top_k == 5  # sent: the request's
    assert applied.params.max_tokens == 64
    assert [m.as_openai() for m in applied.messages or ()] == [
        {"role": "system", "content": "Be brief."},
        *HELLO,
    ]
    assert applied.enable_thinking is False
    own = GenerationRequest(
        model="m",
        params=GenerationParams(max_tokens=8),
        messages=typed([{"role": "developer", "content": "Mine."}, *HELLO]),
        enable_thinking=True,
    )
    assert with_model_defaults(own, DEFAULTS) == own  # probe-style callers set everything
    prompt = GenerationRequest(model="m", prompt="Once upon", params=left_out)
    assert with_model_defaults(prompt, DEFAULTS).prompt == "Once upon"


def test_truncation_drops_the_oldest_turn_and_its_tool_results_never_the_last() -> None:
    call = {"id": "1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    messages = typed(
        [
            {"role": "system", "content": "S"},
            {"role": "assistant", "content": "", "tool_calls": [call]},
            {"role": "tool", "content": "r", "tool_call_id": "1"},
            {"role": "user", "content": "Q"},
            {"role": "assistant", "content": "A"},
            {"role": "user", "content": "last"},
        ]
    )
    shorter = without_oldest_turn(messages)
    assert shorter == (messages[0], *messages[3:])
    assert without_oldest_turn((messages[0], messages[-1])) is None
