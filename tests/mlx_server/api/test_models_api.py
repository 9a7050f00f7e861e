"""GET /v1/models through the real OpenAI SDK, and the error shape clients depend on."""

from __future__ import annotations

import httpx
import openai
import pytest
from fastapi.testclient import TestClient
from sqlmodel import Session

from mlx_server.database import get_engine
from mlx_server.main import create_app as create_server_app
from mlx_server.records import ModelRecord, ModelSource


def _register(*model_ids: str) -> None:
    with Session(get_engine()) as session:
        for model_id in model_ids:
            session.add(ModelRecord(id=model_id, source=ModelSource.GGUF_IMPORT, path=f"/m/{model_id}"))
        session.commit()


def _client(base_url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{base_url}/v1", api_key="not-needed", max_retries=0, timeout=10)


def test_openai_sdk_lists_and_retrieves_models(live_server: str) -> None:
    _register("SmolLM2-135M-Instruct", "mlx-community/Qwen3-0.6B-4bit")
    client = _client(live_server)

    listed = client.models.list()
    assert [m.id for m in listed.data] == ["SmolLM2-135M-Instruct", "mlx-community/Qwen3-0.6B-4bit"]
    assert all(m.object == "model" and m.owned_by == "gguf-import" and m.created > 0 for m in listed.data)

    slashed = client.models.retrieve("mlx-community/Qwen3-0.6B-4bit")
    assert slashed.id == "mlx-community/Qwen3-0.6B-4bit"


def test_unknown_model_is_a_not_found_error_naming_the_fix(live_server: str) -> None:
    with pytest.raises(openai.NotFoundError) as caught:
        _client(live_server).models.retrieve("no-such-model")
    body = caught.value.body
    assert isinstance(body, dict)
    assert body["code"] == "model_not_found" and body["param"] == "model"
    assert "GET /v1/models" in body["message"]


def test_error_body_carries_openai_and_problem_fields(live_server: str) -> None:
    response = httpx.get(f"{live_server}/v1/models/missing")
    assert response.status_code == 404
    body = response.json()
    assert body["error"]["type"] == "not_found_error"
    assert body["status"] == 404 and body["title"] == "Not Found"
    assert body["detail"] == body["error"]["message"]


def test_unknown_route_under_v1_answers_in_the_same_shape(live_server: str) -> None:
    response = httpx.get(f"{live_server}/v1/nothing-here")
    assert response.status_code == 404
    assert response.json()["error"]["message"] == "Not Found"


def test_standalone_server_serves_models_under_v1() -> None:
    with TestClient(create_server_app(embedded=False)) as client:
        _register("standalone-model")
        assert [m["id"] for m in client.get("/v1/models").json()["data"]] == ["standalone-model"]
