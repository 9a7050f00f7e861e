"""langchain-openai 1.7: invoke, stream (the streamed text equals the invoked one), bind_tools
with a named tool_choice (a typed tool call), with_structured_output (json_schema: a parsed
object; function calling is the tool call above) and OpenAIEmbeddings with
check_embedding_ctx_length=False (the texts themselves, not tiktoken ids, reach the model)."""

from __future__ import annotations

import numpy as np
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI, OpenAIEmbeddings

from tests.mlx_server.api.conformance.conftest import EXTRACT, MINILM, SMOL, City
from tests.support import ServerProcess


@tool
def get_weather(city: str) -> str:
    """Get the weather for a city."""
    return "sunny"


def _chat(server: ServerProcess, max_tokens: int) -> ChatOpenAI:
    return ChatOpenAI(
        base_url=f"{server.url}/v1",
        api_key="x",
        model=SMOL,
        temperature=0,
        max_tokens=max_tokens,
        max_retries=0,
    )  # type: ignore[call-arg]


def test_invoke_and_stream_give_the_same_text(inference_server: ServerProcess) -> None:
    chat = _chat(inference_server, 8)
    whole = chat.invoke("Say hello.").content
    streamed = "".join(str(chunk.content) for chunk in chat.stream("Say hello."))
    assert isinstance(whole, str) and whole and streamed == whole


def test_bind_tools_returns_a_typed_tool_call(inference_server: ServerProcess) -> None:
    message = (
        _chat(inference_server, 40)
        .bind_tools([get_weather], tool_choice="get_weather")
        .invoke("What is the weather in Paris?")
    )
    [call] = message.tool_calls  # type: ignore[attr-defined]
    assert call["name"] == "get_weather" and isinstance(call["args"]["city"], str) and call["id"]


def test_with_structured_output_parses_an_object(inference_server: ServerProcess) -> None:
    city = _chat(inference_server, 40).with_structured_output(City, method="json_schema").invoke(EXTRACT)
    assert isinstance(city, City) and city.name and city.country


def test_embeddings_embed_the_texts(inference_server: ServerProcess) -> None:
    embeddings = OpenAIEmbeddings(
        base_url=f"{inference_server.url}/v1", api_key="x", model=MINILM, check_embedding_ctx_length=False
    )  # type: ignore[call-arg]
    cat, kitten, stocks = np.array(
        embeddings.embed_documents(["a cat naps", "a kitten sleeps", "stocks fell"])
    )
    query = np.array(embeddings.embed_query("a cat naps"))
    assert cat.shape == (384,) and np.allclose(query, cat, atol=1e-5)
    assert float(cat @ kitten) > float(cat @ stocks) + 0.3  # normalized vectors: cosines
