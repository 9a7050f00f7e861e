"""The conformance suite: the libraries users point at us, as they use them, against the
session's `mlx-manager serve` (SmolLM2 and all-MiniLM-L6-v2; tests/mlx_server/api/conftest.py).

SmolLM2-135M is tiny: where a library needs a tool call or structured output to happen, the
test asks for it the way the library offers (tool_choice required or named, json_schema), and
the server's constrained decoding makes it happen. Few tokens each, greedy, so a streamed text
can be compared with the whole one."""

from __future__ import annotations

from pydantic import BaseModel

from mlx_server.models.store import DEFAULT_EMBEDDING_MODEL_ID, DEFAULT_MODEL_ID

SMOL = DEFAULT_MODEL_ID
MINILM = DEFAULT_EMBEDDING_MODEL_ID
EXTRACT = "Paris is a city in France. Extract the city."


class City(BaseModel):
    name: str
    country: str
