"""Per-endpoint time limits stop a long generation: 504 (or a last error event) and a free MLX thread."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import anthropic
import pytest
from fastapi.testclient import TestClient
from sqlmodel import Session

from mlx_server.api.timeouts import timeout_for
from mlx_server.config import MLXServerSettings, use_settings
from mlx_server.database import get_engine, upgrade_database
from mlx_server.main import create_app
from mlx_server.models.pool import get_model_pool
from mlx_server.records import ModelRecord, ModelSource
from mlx_server.services.pipeline.engine.generation import admission

LIMIT_S = 1.0
LONG = [{"role": "user", "content": "Write a very long story about a lighthouse keeper."}]


@pytest.fixture
def timed(home: Path, smollm_dir: Path) -> Iterator[TestClient]:
    """The standalone server with SmolLM2 as "smol", loaded, and a 1 s limit on generations."""
    limits = {"POST /v1/chat/completions": LIMIT_S, "POST /v1/messages": LIMIT_S}
    use_settings(MLXServerSettings(allowed_hosts=["testserver"], endpoint_timeouts=limits))
    upgrade_database()
    with Session(get_engine()) as session:
        session.add(ModelRecord(id="smol", source=ModelSource.LOCAL, path=str(smollm_dir)))
        session.commit()
    with TestClient(create_app()) as client:
        assert client.post("/v1/admin/models/smol/load", json={}).status_code == 200
        yield client


def _wait_until_released(timeout: float = 5.0) -> None:
    loaded = get_model_pool().get_loaded("smol")
    deadline = time.monotonic() + timeout
    while (admission.pending or (loaded is not None and loaded.active)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert admission.pending == 0
    assert loaded is not None and loaded.active == 0


def test_endpoint_limits_match_by_glob_first_match_wins() -> None:
    limits = {"POST /v1/admin/models/*/load": 1800.0, "POST /v1/*": 30.0}
    assert timeout_for("POST /v1/admin/models/a/b/load", 600, limits) == 1800
    assert timeout_for("POST /v1/chat/completions", 600, limits) == 30
    assert timeout_for("GET /v1/models", 600, limits) == 600


def test_a_generation_past_its_limit_gets_504_and_frees_the_mlx_thread(timed: TestClient) -> None:
    started = time.monotonic()
    response = timed.post(
        "/v1/chat/completions", json={"model": "smol", "messages": LONG, "max_tokens": 2000}
    )
    assert response.status_code == 504, response.text
    assert time.monotonic() - started < LIMIT_S + 2
    assert "longer than 1 s" in response.json()["error"]["message"]
    assert response.json()["error"]["code"] == "timeout"
    _wait_until_released()
    # The thread serves the next request (/v1/completions has no limit here).
    quick = timed.post("/v1/completions", json={"model": "smol", "prompt": "Hi", "max_tokens": 1})
    assert quick.status_code == 200, quick.text


def test_an_anthropic_timeout_is_timeout_error_streamed_or_not(timed: TestClient) -> None:
    sdk = anthropic.Anthropic(base_url="http://testserver", api_key="x", http_client=timed, max_retries=0)
    with pytest.raises(anthropic.APIStatusError) as stopped:
        sdk.messages.create(model="smol", messages=LONG, max_tokens=2000)  # type: ignore[arg-type]
    _wait_until_released()
    events = sdk.messages.stream(model="smol", messages=LONG, max_tokens=2000)  # type: ignore[arg-type]
    with pytest.raises(anthropic.APIStatusError) as streamed, events as stream:
        for _ in stream:
            pass
    _wait_until_released()
    assert (stopped.value.status_code, streamed.value.status_code) == (504, 200)  # the stream had begun
    for error in (stopped.value, streamed.value):
        assert isinstance(error.body, dict)
        assert error.body["error"]["type"] == "timeout_error"
        assert "longer than 1 s" in error.body["error"]["message"]


def test_a_stream_past_its_limit_ends_with_an_error_event(timed: TestClient) -> None:
    body = {"model": "smol", "messages": LONG, "max_tokens": 2000, "stream": True}
    with timed.stream("POST", "/v1/chat/completions", json=body) as response:
        assert response.status_code == 200
        lines = [line for line in response.iter_lines() if line.startswith("data: ")]
    last = json.loads(lines[-1].removeprefix("data: "))
    assert last["error"]["code"] == "timeout", lines[-3:]
    assert len(lines) > 1  # content arrived before the limit
    _wait_until_released()
