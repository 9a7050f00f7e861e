"""pydantic-ai 2.68 (pydantic-ai-slim[openai]): a tool that runs, then the structured output
parsed into its model; one run covers both, the output being pydantic-ai's output tool. The
tool is offered on the first step only (its own `prepare`, as a user would write it), so the
tiny model cannot call it forever."""

from __future__ import annotations

from pydantic_ai import Agent, RunContext
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider
from pydantic_ai.tools import ToolDefinition

from tests.mlx_server.api.conformance.conftest import SMOL, City
from tests.support import ServerProcess

SETTINGS = {"temperature": 0.0, "max_tokens": 60}


def _model(server: ServerProcess) -> OpenAIChatModel:
    return OpenAIChatModel(SMOL, provider=OpenAIProvider(base_url=f"{server.url}/v1", api_key="x"))


def test_a_tool_runs_then_the_output_is_structured(inference_server: ServerProcess) -> None:
    looked_up: list[str] = []

    async def first_step_only(ctx: RunContext[None], tool: ToolDefinition) -> ToolDefinition | None:
        return tool if ctx.run_step <= 1 else None

    agent = Agent(_model(inference_server), output_type=City, model_settings=SETTINGS)  # type: ignore[arg-type]

    @agent.tool_plain(prepare=first_step_only)
    def country_of(city: str) -> str:
        """The country a city is in."""
        looked_up.append(city)
        return "France"

    result = agent.run_sync("Which country is Paris in? Use country_of.")
    assert looked_up == ["Paris"]
    assert isinstance(result.output, City) and result.output.name and result.output.country
