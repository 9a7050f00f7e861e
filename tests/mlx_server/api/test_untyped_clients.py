"""Programs that send no Content-Type (litellm's Ollama providers, `curl -H 'Content-Type:'`)
are read as JSON; anything a browser sends keeps its refusals. The standalone server's root
answers like Ollama's, which its clients' heartbeat (`HEAD /`) checks."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from mlx_server.config import MLXServerSettings, use_settings
from mlx_server.main import create_app

BODY = json.dumps({"model": "no-such-model", "messages": [{"role": "user", "content": "hi"}]}).encode()


@pytest.fixture
def server(home: Path) -> Iterator[TestClient]:
    use_settings(MLXServerSettings(allowed_hosts=["testserver"]))
    with TestClient(create_app()) as client:
        yield client


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/api/chat"])
def test_a_body_without_content_type_from_a_program_is_read_as_json(server: TestClient, path: str) -> None:
    response = server.post(path, content=BODY)
    # Parsed: the model is looked up (404 naming it), not 415 for the missing type.
    assert response.status_code == 404, response.text
    assert "no-such-model" in response.text


@pytest.mark.parametrize(
    "marks",
    [
        {"origin": "http://testserver"},  # a page of this server's own origin
        {"sec-fetch-mode": "no-cors", "sec-fetch-site": "same-origin"},
        {"sec-fetch-mode": "cors"},
    ],
)
def test_a_body_without_content_type_from_a_browser_is_still_refused(
    server: TestClient, marks: dict[str, str]
) -> None:
    for path in ("/v1/chat/completions", "/api/chat"):
        response = server.post(path, content=BODY, headers=marks)
        assert response.status_code == 415, (path, marks, response.text)


def test_a_cross_site_body_without_content_type_is_refused_as_before(server: TestClient) -> None:
    response = server.post("/api/chat", content=BODY, headers={"origin": "https://evil.example"})
    assert response.status_code == 403
    assert "Cross-site" in response.json()["error"]


def test_the_root_answers_like_ollama_for_get_and_head(server: TestClient) -> None:
    page = server.get("/")
    assert page.status_code == 200 and page.text == "Ollama is running"
    assert server.head("/").status_code == 200
