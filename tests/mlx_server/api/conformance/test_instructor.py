"""instructor 1.17 in its TOOLS and JSON_SCHEMA modes: the response parsed into the model."""

from __future__ import annotations

import instructor
import openai
import pytest

from tests.mlx_server.api.conformance.conftest import EXTRACT, SMOL, City
from tests.support import ServerProcess


@pytest.mark.parametrize("mode", [instructor.Mode.TOOLS, instructor.Mode.JSON_SCHEMA])
def test_the_response_is_parsed_into_the_model(
    inference_server: ServerProcess, mode: instructor.Mode
) -> None:
    client = instructor.from_openai(
        openai.OpenAI(base_url=f"{inference_server.url}/v1", api_key="x", max_retries=0, timeout=300),
        mode=mode,
    )
    city = client.chat.completions.create(
        model=SMOL,
        response_model=City,
        messages=[{"role": "user", "content": EXTRACT}],
        temperature=0,
        max_tokens=40,
        max_retries=0,
    )
    assert isinstance(city, City) and city.name and city.country
