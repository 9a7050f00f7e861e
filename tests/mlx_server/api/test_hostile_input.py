"""Issue 31's attacks on the request edge: text that is not text, seeds and top_k the engine
cannot take, and strings of any length, each refused with a 400 in the protocol's own shape
that names the field (and its limit) before anything reaches the engine; and a failure that is
the server's fault answers 500 on a connection that stays usable."""

from __future__ import annotations

import http.client
import json
from pathlib import Path
from typing import Any

import httpx
from fastapi.testclient import TestClient
from sqlmodel import Session, select

from mlx_server.database import get_engine
from mlx_server.main import create_app as create_server_app
from mlx_server.models.store import default_embedding_model_dir
from mlx_server.records import AuditLog
from mlx_server.services.operations.audit import audit_service
from tests.mlx_server.api.conftest import standalone_server
from tests.support import uvicorn_server

LONE = "a\ud800b"  # a high surrogate with no low one after it: not a character
CHAT = {"model": "smol", "messages": [{"role": "user", "content": LONE}]}
TEXT_ENDPOINTS = [
    ("/v1/chat/completions", CHAT, "messages[0].content"),
    ("/v1/chat/completions", {**CHAT, "stream": True}, "messages[0].content"),
    ("/api/chat", CHAT, "messages[0].content"),
    ("/api/generate", {"model": "smol", "prompt": LONE}, "prompt"),
    ("/v1/messages", {**CHAT, "max_tokens": 4}, "messages[0].content"),
    ("/v1/messages/count_tokens", CHAT, "messages[0].content"),
    ("/v1/responses", {"model": "smol", "input": LONE}, "input"),
    ("/v1/completions", {"model": "smol", "prompt": LONE}, "prompt"),
    ("/v1/embeddings", {"model": "minilm", "input": ["fine", LONE]}, "input[1]"),
    ("/api/embed", {"model": "minilm", "input": LONE}, "input"),
]


def post(client: TestClient | httpx.Client, path: str, body: dict[str, Any]) -> httpx.Response:
    """`body` as JSON escapes (a lone surrogate as \\ud800, as a JSON client writes it)."""
    content = json.dumps(body).encode()
    return client.post(path, content=content, headers={"Content-Type": "application/json"})


def message(response: httpx.Response) -> str:
    """The error message in OpenAI's, Anthropic's or Ollama's shape."""
    error = response.json()["error"]
    return str(error["message"] if isinstance(error, dict) else error)


def test_a_lone_surrogate_is_a_400_naming_the_field_on_every_text_endpoint(smollm_dir: Path) -> None:
    with standalone_server({"smol": smollm_dir, "minilm": default_embedding_model_dir()}) as client:
        for path, body, field in TEXT_ENDPOINTS:
            response = post(client, path, body)
            assert response.status_code == 400, (path, response.text)
            text = message(response)
            assert f"'{field}'" in text and "lone UTF-16 surrogate (\\ud800) at character 1" in text, text
            if path.startswith("/v1/messages"):
                assert response.json()["type"] == "error"  # Anthropic's shape
            elif path.startswith("/v1"):
                assert response.json()["error"]["param"] == field  # OpenAI's
        # Refused while validating: no model was loaded to read the text.
        assert client.get("/v1/admin/pool").json()["models"] == []


def test_seeds_and_top_k_outside_what_the_engine_takes_are_400s(smollm_dir: Path) -> None:
    chat = {"model": "smol", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 1}
    ollama = {"model": "smol", "prompt": "Hi", "stream": False}
    with standalone_server({"smol": smollm_dir}) as client:
        for seed in (-1, 2**70):
            refused = client.post("/v1/chat/completions", json={**chat, "seed": seed})
            assert refused.status_code == 400 and refused.json()["error"]["param"] == "seed", refused.text
        assert "18446744073709551615" in message(refused)  # mlx's PRNG takes an unsigned 64-bit seed
        top_k = client.post("/v1/chat/completions", json={**chat, "top_k": 10**12})
        assert top_k.status_code == 400 and top_k.json()["error"]["param"] == "top_k"
        assert "a vocabulary of 49152 tokens; use at most 49152" in message(top_k)
        claude = client.post("/v1/messages", json={**chat, "top_k": 10**12})
        assert claude.status_code == 400 and "vocabulary of 49152" in claude.json()["error"]["message"]
        too_big = client.post("/api/generate", json={**ollama, "options": {"seed": 2**70}})
        assert too_big.status_code == 400 and "options.seed" in message(too_big)
        # The edges are served: the largest seed, a top_k of the whole vocabulary, and Ollama's
        # own default seed -1 (a random one).
        edge = {**chat, "seed": 2**64 - 1, "top_k": 49152, "temperature": 1.0}
        assert client.post("/v1/chat/completions", json=edge).status_code == 200
        assert (
            client.post(
                "/api/generate", json={**ollama, "options": {"seed": -1, "num_predict": 1}}
            ).status_code
            == 200
        )


LONG = "x" * 100_000
HI = {"model": "smol", "messages": [{"role": "user", "content": "Hi"}]}
BOUNDED_FIELDS = [
    ("/v1/chat/completions", {**HI, "model": LONG}, "model", 256),
    ("/v1/chat/completions", {**HI, "stop": ["ok", LONG]}, "stop", 1024),
    ("/v1/chat/completions", {**HI, "user": LONG}, "user", 256),
    (
        "/v1/chat/completions",
        {**HI, "tools": [{"type": "function", "function": {"name": LONG, "parameters": {}}}]},
        "tools",
        128,
    ),
    ("/v1/completions", {"model": "smol", "prompt": "Hi", "stop": LONG}, "stop", 1024),
    ("/v1/messages", {**HI, "max_tokens": 4, "model": LONG}, "model", 256),
    ("/v1/messages", {**HI, "max_tokens": 4, "stop_sequences": [LONG]}, "stop_sequences", 1024),
    ("/v1/messages", {**HI, "max_tokens": 4, "stop_sequences": ["s"] * 17}, "stop_sequences", 16),
    ("/v1/messages", {**HI, "max_tokens": 4, "metadata": {"user_id": LONG}}, "metadata.user_id", 256),
    (
        "/v1/responses",
        {"model": "smol", "input": "Hi", "previous_response_id": LONG},
        "previous_response_id",
        256,
    ),
    ("/v1/embeddings", {"model": LONG, "input": "Hi"}, "model", 256),
    ("/v1/audio/speech", {"model": "tts", "input": "Hi", "voice": LONG}, "voice", 128),
    ("/api/chat", {**HI, "model": LONG}, "model", 256),
    ("/api/generate", {"model": "smol", "prompt": "Hi", "options": {"stop": [LONG]}}, "options.stop", 1024),
    ("/api/show", {"model": LONG}, "model", 256),
]


def test_strings_a_server_keeps_or_echoes_are_bounded_at_the_edge(client: TestClient) -> None:
    for path, body, field, limit in BOUNDED_FIELDS:
        response = client.post(path, json=body)
        assert response.status_code == 400, (path, field, response.text)
        text = message(response)
        assert f"'{field}'" in text and str(limit) in text, text
        assert LONG not in response.text  # never echoed back


def test_a_server_error_answers_500_on_a_keep_alive_connection_that_stays_usable(home: Path) -> None:
    app = create_server_app()

    @app.get("/v1/test/boom")  # a bug: the one kind of failure no check turns into a 4xx
    def boom() -> None:
        raise RuntimeError("boom")

    with uvicorn_server(app) as url:
        connection = http.client.HTTPConnection(url.removeprefix("http://"), timeout=10)
        connection.request("GET", "/v1/test/boom")
        failed = connection.getresponse()
        body = json.loads(failed.read())
        socket = connection.sock
        assert failed.status == 500 and body["error"]["code"] == "internal_error"
        assert failed.getheader("connection") != "close" and "boom" not in json.dumps(body)
        connection.request("GET", "/v1/models")  # on the same connection
        assert connection.getresponse().status == 200 and connection.sock is socket
        connection.close()
    assert audit_service.flush(5)
    with Session(get_engine()) as session:
        row = session.exec(
            select(AuditLog).where(AuditLog.request_id == failed.getheader("x-request-id"))
        ).one()
    assert (row.status, row.error) == (500, "RuntimeError: boom")
