"""openai-agents 0.24 with both model classes (Chat Completions and Responses): a tool round
trip where the tool really runs, a streamed run whose text equals the final output, and issue
#30's loop replayed: it ends with the model's text, never ''."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from agents import (
    Agent,
    ModelSettings,
    OpenAIChatCompletionsModel,
    OpenAIResponsesModel,
    Runner,
    function_tool,
    set_tracing_disabled,
)
from openai import AsyncOpenAI
from openai.types.responses import ResponseTextDeltaEvent

from tests.mlx_server.api.conformance.conftest import SMOL
from tests.support import ServerProcess

set_tracing_disabled(True)  # no traces to OpenAI's servers
MODELS = {"chat": OpenAIChatCompletionsModel, "responses": OpenAIResponsesModel}
RECORDED = json.loads((Path(__file__).parents[1] / "data" / "openai_agents_tool_loop.json").read_text())


def _model(server: ServerProcess, kind: str) -> OpenAIChatCompletionsModel | OpenAIResponsesModel:
    client = AsyncOpenAI(base_url=f"{server.url}/v1", api_key="x", max_retries=0, timeout=300)
    return MODELS[kind](model=SMOL, openai_client=client)


def test_a_tool_is_called_and_its_result_ends_the_run(inference_server: ServerProcess) -> None:
    """With the Responses model (the Chat Completions model's tool turn is the replay below)."""
    asked: list[str] = []

    @function_tool
    def get_weather(city: str) -> str:
        """Get the weather for a city."""
        asked.append(city)
        return f"Sunny, 21 C in {city}"

    agent = Agent(
        name="Weather",
        instructions="You are a helpful assistant.",
        tools=[get_weather],
        tool_use_behavior="stop_on_first_tool",
        model=_model(inference_server, "responses"),
        model_settings=ModelSettings(tool_choice="required", temperature=0, max_tokens=40),
    )
    result = asyncio.run(Runner.run(agent, "What is the weather in Paris?"))
    assert asked and asked[0] == "Paris"
    assert result.final_output == "Sunny, 21 C in Paris"


@pytest.mark.parametrize("kind", sorted(MODELS))
def test_a_streamed_run_streams_the_final_output(inference_server: ServerProcess, kind: str) -> None:
    agent = Agent(
        name="Terse",
        instructions="You are terse.",
        model=_model(inference_server, kind),
        model_settings=ModelSettings(temperature=0, max_tokens=24),
    )

    async def run() -> tuple[str, str]:
        streamed = Runner.run_streamed(agent, "What is 2+2? Answer with a number only.")
        deltas = [
            event.data.delta
            async for event in streamed.stream_events()
            if event.type == "raw_response_event" and isinstance(event.data, ResponseTextDeltaEvent)
        ]
        return "".join(deltas), str(streamed.final_output)

    text, final = asyncio.run(run())
    assert text and text == final


def test_the_loop_that_ended_empty_now_ends_with_the_models_text(inference_server: ServerProcess) -> None:
    """Issue #30's run: the history as openai-agents sends it after a tool result (the recorded
    request); the model then writes a call of an undeclared tool. final_output was ''."""

    @function_tool
    def get_stock_price(symbol: str) -> str:
        """Get a stock price."""
        return "189.3 USD"

    agent = Agent(
        name="Assistant",
        instructions=RECORDED["messages"][0]["content"],
        tools=[get_stock_price],
        model=_model(inference_server, "chat"),
        model_settings=ModelSettings(temperature=0, max_tokens=RECORDED["max_tokens"]),
    )
    call = RECORDED["messages"][2]["tool_calls"][0]
    history = [
        {"role": "user", "content": RECORDED["messages"][1]["content"]},
        {"type": "function_call", "call_id": call["id"], "name": call["function"]["name"],
         "arguments": call["function"]["arguments"]},
        {"type": "function_call_output", "call_id": call["id"], "output": RECORDED["messages"][3]["content"]},
    ]  # fmt: skip
    result = asyncio.run(Runner.run(agent, history, max_turns=2))  # type: ignore[arg-type]
    assert result.final_output and "get_stock_price_args" in result.final_output
