"""Every error on an Anthropic route is Anthropic-shaped, whichever layer answers it (guard, key
check, body reading, routing, time limit, a bug); OpenAI routes keep OpenAI's shape."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from mlx_server.api.error_shapes import INTERNAL_ERROR, install_error_handlers
from mlx_server.config import MLXServerSettings, use_settings
from mlx_server.main import create_app

MB = 1024 * 1024


@pytest.fixture
def server(home: Path) -> Iterator[TestClient]:
    use_settings(MLXServerSettings(allowed_hosts=["testserver"], max_body_bytes=MB))
    with TestClient(create_app()) as client:
        yield client


def _anthropic_error(response: Any, status: int, kind: str) -> str:
    """Checks Anthropic's shape; returns the message."""
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"type", "error", "request_id"}, body
    assert body["type"] == "error" and body["error"]["type"] == kind, body
    assert body["request_id"] == response.headers["x-request-id"]
    message: str = body["error"]["message"]
    assert message
    return message


def test_a_chunked_body_over_the_limit_is_an_anthropic_413(server: TestClient) -> None:
    def chunks() -> Iterator[bytes]:  # no Content-Length: refused while it is read
        yield b'{"model": "x", "max_tokens": 5, "messages": ['
        for _ in range(32):
            yield b'{"role": "user", "content": "' + b"a" * 64 * 1024 + b'"},'

    response = server.post("/v1/messages", content=chunks(), headers={"content-type": "application/json"})
    assert f"larger than {MB} bytes" in _anthropic_error(response, 413, "request_too_large")


def test_a_body_over_the_limit_through_the_anthropic_sdk(server: TestClient) -> None:
    sdk = anthropic.Anthropic(base_url="http://testserver", api_key="x", http_client=server, max_retries=0)
    with pytest.raises(anthropic.APIStatusError) as refused:
        sdk.messages.create(model="x", max_tokens=5, messages=[{"role": "user", "content": "a" * 2 * MB}])
    assert refused.value.status_code == 413
    assert isinstance(refused.value.body, dict)
    assert refused.value.body["error"]["type"] == "request_too_large"


@pytest.mark.parametrize(
    ("method", "path", "headers", "status", "kind"),
    [
        ("GET", "/v1/messages", {}, 405, "invalid_request_error"),
        ("POST", "/v1/messages/batches", {"content-type": "application/json"}, 404, "not_found_error"),
        ("POST", "/v1/messages", {"content-type": "text/plain"}, 415, "invalid_request_error"),
        ("POST", "/v1/messages", {"host": "evil.example"}, 421, "invalid_request_error"),
    ],
    ids=["405", "404", "415", "421"],
)
def test_refusals_outside_the_route_are_anthropic_shaped(
    server: TestClient, method: str, path: str, headers: dict[str, str], status: int, kind: str
) -> None:
    response = server.request(method, path, content=b"{}", headers=headers)
    _anthropic_error(response, status, kind)
    openai_path = path.replace("/messages", "/chat/completions")
    openai = server.request(method, openai_path, content=b"{}", headers=headers)
    assert openai.status_code == status and "type" in openai.json()["error"]
    assert openai.json()["status"] == status  # OpenAI's shape with the problem fields


def test_an_unexpected_failure_is_a_500_in_the_routes_shape() -> None:
    app = FastAPI()
    install_error_handlers(app)

    @app.post("/v1/messages/fail")
    @app.post("/v1/chat/fail")
    def fail() -> None:
        raise RuntimeError("secret detail /home/someone/prompt.txt")

    with TestClient(app, raise_server_exceptions=False) as client:
        claude = client.post("/v1/messages/fail")
        assert claude.status_code == 500
        assert claude.json() == {"type": "error", "error": {"type": "api_error", "message": INTERNAL_ERROR}}
        openai = client.post("/v1/chat/fail")
        assert openai.status_code == 500 and openai.json()["error"]["code"] == "internal_error"
        assert "secret" not in claude.text + openai.text
