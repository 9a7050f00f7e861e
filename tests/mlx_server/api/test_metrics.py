"""GET /metrics: Prometheus text that parses, counters that move by exactly the requests sent,
the pool's gauges read at scrape time, and who may scrape."""

from __future__ import annotations

from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families
from sqlmodel import Session

from mlx_server.config import reset_settings
from mlx_server.main import create_app as create_server_app
from mlx_server.records import ApiKeyScope
from mlx_server.services.operations.api_keys import create_api_key
from tests.mlx_server.api.conftest import standalone_server
from tests.support import free_port

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]
CHAT = "POST /v1/chat/completions"


def scrape(client: TestClient, **headers: str) -> Samples:
    response = client.get("/metrics", headers=headers)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/plain; version=")
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(response.text)
        for sample in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def test_counters_move_by_exactly_the_requests_sent(smollm_dir: Path) -> None:
    with standalone_server({"smol": smollm_dir}) as client:
        before = scrape(client)
        assert value(before, "mlx_server_models_loaded") == 0
        assert value(before, "mlx_server_pool_memory_budget_bytes") > 0
        for _ in range(2):
            assert client.get("/v1/models").status_code == 200
        chat = client.post(
            "/v1/chat/completions",
            json={"model": "smol", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 3},
        )
        assert chat.status_code == 200
        usage = chat.json()["usage"]
        missing = client.post(
            "/v1/chat/completions", json={"model": "nope", "messages": [{"role": "user", "content": "x"}]}
        )
        assert missing.status_code == 404
        client.get("/health")  # not a /v1 request: never counted
        after = scrape(client)

    def moved(name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    assert moved("mlx_server_requests_total", endpoint="GET /v1/models", model="", status="200") == 2
    assert moved("mlx_server_requests_total", endpoint=CHAT, model="smol", status="200") == 1
    # A name no model or rule has: counted, but as "unknown" (clients cannot make up series).
    assert moved("mlx_server_requests_total", endpoint=CHAT, model="unknown", status="404") == 1
    assert not any(("model", "nope") in labels for _, labels in after)
    total = sum(v for (name, _), v in after.items() if name == "mlx_server_requests_total")
    assert total == 4
    assert moved("mlx_server_prompt_tokens_total", model="smol") == usage["prompt_tokens"]
    assert moved("mlx_server_completion_tokens_total", model="smol") == usage["completion_tokens"]
    assert moved("mlx_server_time_to_first_token_seconds_count", model="smol") == 1
    assert moved("mlx_server_request_duration_seconds_count", endpoint=CHAT) == 2
    # Read from the pool when scraped: the model the chat loaded.
    assert value(after, "mlx_server_models_loaded") == 1
    size = value(after, "mlx_server_model_size_bytes", model="smol", type="text-gen")
    assert size > 50 * 2**20
    assert value(after, "mlx_server_pool_memory_used_bytes") >= size
    assert value(after, "mlx_server_queue_depth") == 0


def test_two_apps_count_apart() -> None:
    with TestClient(create_server_app()) as first, TestClient(create_server_app()) as second:
        first.get("/v1/models")
        labels = (("endpoint", "GET /v1/models"), ("model", ""), ("status", "200"))
        key = ("mlx_server_requests_total", labels)
        assert scrape(first)[key] == 1
        assert key not in scrape(second)


def test_metrics_need_an_admin_key_once_keys_exist(session: Session, monkeypatch: pytest.MonkeyPatch) -> None:
    with TestClient(create_server_app()) as client:
        scrape(client)  # loopback and no key created: open, like /v1
        inference = create_api_key(session, name="app").secret
        admin = create_api_key(session, name="ops", scope=ApiKeyScope.ADMIN).secret
        refused = client.get("/metrics")
        assert refused.status_code == 401 and "admin scope" in refused.text
        assert "MLX_SERVER_METRICS_PUBLIC" in refused.text
        wrong = client.get("/metrics", headers={"Authorization": "Bearer not-a-key"})
        assert wrong.status_code == 401 and wrong.text.startswith("The API key is not valid")
        narrow = client.get("/metrics", headers={"Authorization": f"Bearer {inference}"})
        assert narrow.status_code == 403 and "'app' has the inference scope" in narrow.text
        scrape(client, Authorization=f"Bearer {admin}")
    monkeypatch.setenv("MLX_SERVER_METRICS_PUBLIC", "true")
    reset_settings()
    with TestClient(create_server_app()) as client:
        scrape(client)


def test_breaker_states_of_remote_backends(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MLX_SERVER_REMOTE_BREAKER_FAILURES", "1")
    reset_settings()
    down = {"name": "down", "kind": "openai", "base_url": f"http://127.0.0.1:{free_port()}/v1"}
    with TestClient(create_server_app()) as client:
        assert client.post("/v1/admin/backends?refresh=false", json=down).status_code == 200
        before = scrape(client)
        assert value(before, "mlx_server_backend_breaker_state", backend="down", state="closed") == 1
        assert value(before, "mlx_server_backend_breaker_state", backend="down", state="open") == 0
        assert client.post("/v1/admin/backends/down/refresh").status_code == 502  # nothing listens
        after = scrape(client)
    assert value(after, "mlx_server_backend_breaker_state", backend="down", state="open") == 1
    assert value(after, "mlx_server_backend_breaker_state", backend="down", state="closed") == 0
    assert value(after, "mlx_server_backend_consecutive_failures", backend="down") == 1
