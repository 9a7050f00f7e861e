"""Per-model defaults over /v1/admin/models/{id}/defaults, applied by every protocol to what a
request leaves out, with the real SmolLM2 on the standalone server app."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlmodel import Session

from mlx_server.database import get_engine
from mlx_server.records import ModelRecord
from mlx_server.services.operations.model_defaults import REFRESH_S
from tests.mlx_server.api.conftest import standalone_server

DEFAULTS = "/v1/admin/models/smol/defaults"
LONG = "word " * 100  # ~100 tokens


@pytest.fixture
def api(smollm_dir: Path) -> Iterator[TestClient]:
    with standalone_server({"smol": smollm_dir}) as client:
        yield client


def _chat(api: TestClient, content: str = "Tell me a story.", **fields: Any) -> dict[str, Any]:
    body = {"model": "smol", "messages": [{"role": "user", "content": content}], **fields}
    response = api.post("/v1/chat/completions", json=body)
    assert response.status_code == 200, response.text
    return response.json()  # type: ignore[no-any-return]


def test_defaults_are_set_changed_replaced_and_refused_with_reasons(api: TestClient) -> None:
    assert api.get(DEFAULTS).json()["temperature"] is None
    patched = api.patch(DEFAULTS, json={"temperature": 0, "system_prompt": "Be brief."}).json()
    assert (patched["temperature"], patched["system_prompt"]) == (0.0, "Be brief.")
    assert api.patch(DEFAULTS, json={"top_k": 20}).json()["temperature"] == 0.0  # PATCH keeps the rest
    replaced = api.put(DEFAULTS, json={"context_length": 2048}).json()
    assert replaced["context_length"] == 2048 and replaced["temperature"] is None  # PUT replaces all
    too_long = api.patch(DEFAULTS, json={"context_length": 100_000})
    assert too_long.status_code == 400 and "trained for (8192 tokens)" in too_long.json()["error"]["message"]
    unknown = api.patch(DEFAULTS, json={"temprature": 0})
    assert unknown.status_code == 400 and "temprature" in unknown.text
    missing = api.get("/v1/admin/models/nope/defaults")
    assert missing.status_code == 404 and "GET /v1/models" in missing.json()["error"]["message"]


def test_a_context_length_of_64_refuses_a_100_token_prompt_on_every_protocol(api: TestClient) -> None:
    api.patch(DEFAULTS, json={"context_length": 64})
    user = [{"role": "user", "content": LONG}]
    requests = {
        "/v1/chat/completions": {"model": "smol", "messages": user},
        "/v1/completions": {"model": "smol", "prompt": LONG},
        "/v1/messages": {"model": "smol", "max_tokens": 8, "messages": user},
        "/v1/responses": {"model": "smol", "input": LONG},
        "/api/chat": {"model": "smol", "messages": user, "stream": False},
    }
    for path, body in requests.items():
        response = api.post(path, json=body)
        assert response.status_code == 400, (path, response.text)
        assert "a context of 64 tokens (its context_length default)" in response.text, path


def test_truncation_drops_the_oldest_messages_until_the_prompt_fits(api: TestClient) -> None:
    question = {"role": "user", "content": f"A question: {LONG[:100]}"}
    messages = [*[question, {"role": "assistant", "content": "Ok."}] * 4, {"role": "user", "content": "Hi."}]
    api.patch(DEFAULTS, json={"context_length": 128})
    refused = api.post("/v1/chat/completions", json={"model": "smol", "messages": messages, "max_tokens": 2})
    assert refused.status_code == 400
    api.patch(DEFAULTS, json={"context_overflow": "truncate"})
    usage = _chat(api, messages=messages, max_tokens=2)["usage"]
    assert 0 < usage["prompt_tokens"] <= 128 - 2


def _first_answer(api: TestClient, messages: list[dict[str, str]], **fields: Any) -> str:
    body = {"model": "smol", "messages": messages, "max_tokens": 6, **fields}
    return str(api.post("/v1/chat/completions", json=body).json()["choices"][0]["message"]["content"])


def test_default_temperature_zero_makes_two_requests_without_temperature_identical(api: TestClient) -> None:
    api.patch(DEFAULTS, json={"temperature": 0})
    story = [{"role": "user", "content": "Tell me a story about a cat."}]
    first, second = _first_answer(api, story), _first_answer(api, story)
    assert first == second == _first_answer(api, story, temperature=0)
    ollama = {"model": "smol", "messages": story, "stream": False, "options": {"num_predict": 6}}
    # The model's 0 wins over Ollama's own default of 0.8.
    assert api.post("/api/chat", json=ollama).json()["message"]["content"] == first


def test_system_prompt_and_max_tokens_defaults_apply_and_ollama_shows_them(api: TestClient) -> None:
    pirate = "You are a pirate. Answer like one, always."
    with_system = [{"role": "system", "content": pirate}, {"role": "user", "content": "Tell me a story."}]
    sent = _chat(api, messages=with_system, max_tokens=1)["usage"]["prompt_tokens"]
    plain = _chat(api, max_tokens=1)["usage"]["prompt_tokens"]  # the template's own default system
    api.patch(DEFAULTS, json={"system_prompt": pirate, "max_tokens": 3})
    reply = _chat(api)
    assert reply["usage"]["completion_tokens"] <= 3 and reply["choices"][0]["finish_reason"] == "length"
    assert reply["usage"]["prompt_tokens"] == sent != plain  # exactly as if the request had sent it
    shown = api.post("/api/show", json={"model": "smol"}).json()
    assert shown["system"] == pirate
    assert "num_predict                    3" in shown["parameters"]
    assert f'SYSTEM """{pirate}"""' in shown["modelfile"]


def test_a_change_made_by_another_process_reaches_the_loaded_model(api: TestClient) -> None:
    assert _chat(api, max_tokens=4)["usage"]["completion_tokens"] == 4  # loaded, no defaults
    with Session(get_engine()) as session:  # what `mlx-manager models set` does beside a server
        record = session.get(ModelRecord, "smol")
        assert record is not None
        record.defaults = {"max_tokens": 2}
        session.add(record)
        session.commit()
    time.sleep(REFRESH_S + 0.1)
    assert _chat(api)["usage"]["completion_tokens"] == 2
