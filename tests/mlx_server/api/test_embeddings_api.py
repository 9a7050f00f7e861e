"""POST /v1/embeddings through the real openai SDK, with the real all-MiniLM-L6-v2 and SmolLM2."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import openai
import pytest
from fastapi.testclient import TestClient
from sqlmodel import Session, select

from mlx_server.database import get_engine
from mlx_server.models.store import DEFAULT_EMBEDDING_MODEL_ID, default_embedding_model_dir
from mlx_server.records import AuditLog
from mlx_server.services.operations.audit import audit_service
from tests.mlx_server.api.conftest import standalone_server

MODEL = DEFAULT_EMBEDDING_MODEL_ID
CAT, KITTEN, STOCKS = (
    "A cat sits on the mat",
    "A kitten is resting on a rug",
    "Stock markets fell sharply today",
)


@pytest.fixture
def server(home: Path, smollm_dir: Path) -> Iterator[TestClient]:
    """The standalone server app with all-MiniLM-L6-v2 and SmolLM2 ("smol") registered."""
    with standalone_server({MODEL: default_embedding_model_dir(), "smol": smollm_dir}) as client:
        yield client


@pytest.fixture
def sdk(server: TestClient) -> openai.OpenAI:
    return openai.OpenAI(base_url="http://testserver/v1", api_key="x", http_client=server, max_retries=0)


def _matrix(response: Any) -> np.ndarray:
    return np.array([item.embedding for item in response.data], dtype=np.float32)


def test_openai_sdk_gets_384_dimensional_unit_vectors_ranked_by_meaning(sdk: openai.OpenAI) -> None:
    response = sdk.embeddings.create(model=MODEL, input=[CAT, KITTEN, STOCKS])
    vectors = _matrix(response)
    assert vectors.shape == (3, 384) and [item.index for item in response.data] == [0, 1, 2]
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert float(vectors[0] @ vectors[1]) > float(vectors[0] @ vectors[2])
    # [CLS] + words + [SEP]: 8, 9 and 7 tokens
    assert response.usage.prompt_tokens == response.usage.total_tokens == 24
    assert response.model == MODEL


def test_base64_decodes_to_the_same_vectors_as_float(sdk: openai.OpenAI) -> None:
    floats = _matrix(sdk.embeddings.create(model=MODEL, input=[CAT, STOCKS], encoding_format="float"))
    encoded = sdk.embeddings.create(model=MODEL, input=[CAT, STOCKS], encoding_format="base64")
    decoded = np.stack(
        [np.frombuffer(base64.b64decode(item.embedding), dtype="<f4") for item in encoded.data]
    )
    assert np.array_equal(decoded, floats)


def test_a_string_and_token_ids_are_accepted_as_input(sdk: openai.OpenAI, server: TestClient) -> None:
    one = _matrix(sdk.embeddings.create(model=MODEL, input=CAT))
    ids = server.post(
        "/v1/embeddings", json={"model": MODEL, "input": [[1037, 4937, 7719, 2006, 1996, 13523]]}
    )
    assert ids.status_code == 200, ids.text
    assert np.allclose(one[0], ids.json()["data"][0]["embedding"], atol=1e-6)


def _healthy(server: TestClient, sdk: openai.OpenAI) -> None:
    assert server.get("/health").json()["status"] == "ok"
    assert len(sdk.embeddings.create(model=MODEL, input="still here").data[0].embedding) == 384


@pytest.mark.parametrize(
    ("path", "body", "status", "message"),
    [
        ("/v1/embeddings", {"input": ""}, 400, "input[0] is empty"),
        ("/v1/embeddings", {"input": []}, 400, "input is an empty list"),
        ("/v1/embeddings", {"input": ["ok", "word " * 300]}, 400, "input[1] is 302 tokens"),
        ("/v1/embeddings", {"input": ["short text"] * 5000}, 400, "at most 2048 are accepted"),
        ("/v1/embeddings", {"input": "x", "dimensions": 64}, 400, "not trained to be shortened"),
        ("/v1/embeddings", {"model": "no-such-model", "input": "x"}, 404, "does not exist"),
        ("/v1/embeddings", {"model": "smol", "input": "x"}, 400, "use /v1/chat/completions"),
        (
            "/v1/chat/completions",
            {"messages": [{"role": "user", "content": "hi"}]},
            400,
            "use /v1/embeddings",
        ),
    ],
)
def test_bad_requests_are_clear_client_errors_and_the_server_stays_healthy(
    server: TestClient, sdk: openai.OpenAI, path: str, body: dict[str, Any], status: int, message: str
) -> None:
    response = server.post(path, json={"model": MODEL, **body})
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert message in error["message"] and error["type"] in ("invalid_request_error", "not_found_error")
    _healthy(server, sdk)


def test_the_sdk_raises_bad_request_for_a_chat_model_on_embeddings(sdk: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError, match="'smol' is of type text-gen; use /v1/chat/completions"):
        sdk.embeddings.create(model="smol", input=CAT)


def test_truncate_option_keeps_the_first_tokens(server: TestClient) -> None:
    response = server.post("/v1/embeddings", json={"model": MODEL, "input": "word " * 300, "truncate": True})
    assert response.status_code == 200, response.text
    assert response.json()["usage"]["prompt_tokens"] == 256


def test_audit_row_records_input_count_and_tokens(sdk: openai.OpenAI) -> None:
    sdk.embeddings.create(model=MODEL, input=[CAT, KITTEN, STOCKS], encoding_format="float")
    assert audit_service.flush()
    with Session(get_engine()) as session:
        row = session.exec(select(AuditLog).where(AuditLog.endpoint == "POST /v1/embeddings")).one()
    assert (row.model, row.status, row.protocol, row.stream) == (MODEL, 200, "openai", False)
    assert row.prompt_tokens == 24 and row.completion_tokens is None
    assert row.parameters == {"encoding_format": "float", "input_count": 3}
