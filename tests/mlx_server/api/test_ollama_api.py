"""Ollama's API under /api through the real `ollama` client, against `mlx-manager serve` with
SmolLM2 and all-MiniLM-L6-v2 (the session's server), and its guards, keys, errors and audit
rows on the apps in this process."""

from __future__ import annotations

import base64
import io
import json
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import ollama
import pytest
from fastapi.testclient import TestClient
from jsonschema import Draft202012Validator
from PIL import Image
from sqlmodel import Session, select

from mlx_server.api.timeouts import stream_error_event
from mlx_server.database import get_engine
from mlx_server.models.store import DEFAULT_EMBEDDING_MODEL_ID, DEFAULT_MODEL_ID
from mlx_server.records import AuditLog
from mlx_server.services.operations.api_keys import create_api_key
from mlx_server.services.operations.audit import audit_service
from tests.mlx_server.api.conftest import standalone_server
from tests.support import ServerProcess

SMOL = DEFAULT_MODEL_ID
VISION = "tiny-vl"
GREEDY = {"temperature": 0, "num_predict": 8}
HELLO = [{"role": "user", "content": "Say hello."}]


def _png(color: tuple[int, int, int]) -> str:
    out = io.BytesIO()
    Image.new("RGB", (112, 112), color).save(out, format="PNG")
    return base64.b64encode(out.getvalue()).decode()


RED_PNG = _png((220, 30, 30))


@pytest.fixture
def client(inference_server: ServerProcess) -> ollama.Client:
    # A long prefill on a busy machine: allow minutes, as the other protocols' clients do.
    return ollama.Client(host=inference_server.url, timeout=300)


# --- The real client against the real server ---


def test_chat_streamed_and_whole_give_the_same_greedy_reply(client: ollama.Client) -> None:
    started = datetime.now(UTC)
    whole = client.chat(model=SMOL, messages=HELLO, options=GREEDY)
    assert whole.done and whole.done_reason in ("stop", "length")
    assert whole.message.role == "assistant" and whole.message.content
    assert 0 < (whole.eval_count or 0) <= 8 and (whole.prompt_eval_count or 0) > 0
    assert (whole.total_duration or 0) >= (whole.eval_duration or 0) > 0

    chunks = list(client.chat(model=SMOL, messages=HELLO, options=GREEDY, stream=True))
    assert [c.done for c in chunks] == [False] * (len(chunks) - 1) + [True]
    assert "".join(c.message.content or "" for c in chunks) == whole.message.content
    assert chunks[-1].eval_count == whole.eval_count and chunks[-1].done_reason == whole.done_reason
    rows = _audit_rows(client, "POST /api/chat", started, 2)
    assert [(r["protocol"], r["stream"], r["model"]) for r in rows] == [
        ("ollama", True, SMOL),
        ("ollama", False, SMOL),
    ]
    assert {r["completion_tokens"] for r in rows} == {whole.eval_count} and rows[0]["ttft_ms"] > 0
    assert rows[0]["parameters"] == {"temperature": 0.0, "num_predict": 8}


def _audit_rows(client: ollama.Client, endpoint: str, since: datetime, count: int) -> list[dict[str, Any]]:
    """The audit rows of `endpoint` since `since`, newest first, once there are `count` of them
    (a background thread writes them)."""
    query = {"endpoint": endpoint, "since": since.isoformat()}
    deadline = time.monotonic() + 10
    while True:
        rows: list[dict[str, Any]] = client._client.get("/v1/admin/audit", params=query).json()["data"]
        if len(rows) >= count or time.monotonic() > deadline:
            return rows
        time.sleep(0.1)


def test_generate_continues_a_raw_prompt(client: ollama.Client) -> None:
    raw = client.generate(model=SMOL, prompt="One, two, three,", raw=True, options=GREEDY)
    assert raw.done and raw.response and 0 < (raw.eval_count or 0) <= 8


def test_generate_without_stream_gets_ndjson_as_from_ollama(inference_server: ServerProcess) -> None:
    body = {"model": f"{SMOL}:latest", "prompt": "Say hello.", "options": {"num_predict": 3}}
    response = httpx.post(f"{inference_server.url}/api/generate", json=body, timeout=300)
    assert response.status_code == 200 and response.headers["content-type"] == "application/x-ndjson"
    lines = [json.loads(line) for line in response.text.splitlines()]
    assert [line["done"] for line in lines] == [False] * (len(lines) - 1) + [True]
    assert "".join(line["response"] for line in lines).strip() and lines[-1]["model"] == SMOL
    assert lines[-1]["eval_count"] <= 3 and lines[-1]["total_duration"] > 0


def test_list_show_and_ps_describe_the_models(client: ollama.Client) -> None:
    names = {m.model for m in client.list().models}
    assert {SMOL, DEFAULT_EMBEDDING_MODEL_ID} <= names
    shown = client.show(SMOL)
    assert "<|im_start|>" in (shown.template or "") and shown.details and shown.details.family == "llama"
    assert (
        "completion" in (shown.capabilities or []) and (shown.modelinfo or {})["llama.context_length"] == 8192
    )


def test_keep_alive_keeps_loaded_or_unloads_and_ps_shows_it(client: ollama.Client) -> None:
    assert client.generate(model=SMOL, prompt="", keep_alive=-1).done_reason == "load"
    expires = {m.model: m.expires_at for m in client.ps().models}[SMOL]
    assert expires is not None and expires.year > datetime.now(UTC).year + 100  # no expiry in sight
    # A dashboard pin wins over a client's keep_alive 0.
    assert client._client.post(f"/v1/admin/models/{SMOL}/pin").status_code == 200
    assert client.generate(model=SMOL, prompt="", keep_alive=0).done_reason == "load"
    assert SMOL in {m.model for m in client.ps().models}
    assert client._client.post(f"/v1/admin/models/{SMOL}/unpin").status_code == 200
    assert client.generate(model=SMOL, prompt="", keep_alive=0).done_reason == "unload"
    assert SMOL not in {m.model for m in client.ps().models}
    assert client.generate(model=SMOL, prompt="", keep_alive="5m").done_reason == "load"
    expires = {m.model: m.expires_at for m in client.ps().models}[SMOL]
    assert expires is not None and 240 < (expires - datetime.now(UTC)).total_seconds() <= 300
    client.generate(model=SMOL, prompt="", keep_alive=-1)  # as the session's server keeps it (TTL 0)


def test_format_schema_reply_is_valid_json(client: ollama.Client) -> None:
    schema = {
        "type": "object",
        "properties": {"ok": {"type": "boolean"}},
        "required": ["ok"],
        "additionalProperties": False,
    }
    reply = client.chat(model=SMOL, messages=HELLO, format=schema, options={"num_predict": 16})
    Draft202012Validator(schema).validate(json.loads(reply.message.content or ""))


def test_tools_come_back_as_calls_with_object_arguments(client: ollama.Client) -> None:
    """Ollama has no tool_choice; two earlier calls in the history show SmolLM2 what to do."""
    weather = {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Current weather in a city",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"],
            },
        },
    }
    history: list[dict[str, Any]] = []
    for city in ("London", "Rome"):
        call = {"function": {"name": "get_weather", "arguments": {"city": city}}}
        history += [
            {"role": "user", "content": f"Weather in {city}?"},
            {"role": "assistant", "tool_calls": [call]},
        ]
    messages = [*history, {"role": "user", "content": "Weather in Paris?"}]
    # A call in SmolLM2's format is ~30 tokens.
    reply = client.chat(
        model=SMOL, messages=messages, tools=[weather], options={"temperature": 0, "num_predict": 40}
    )
    calls = reply.message.tool_calls or []
    assert [(c.function.name, dict(c.function.arguments)) for c in calls] == [
        ("get_weather", {"city": "Paris"})
    ]
    assert reply.done_reason == "stop"


def test_embed_ranks_by_meaning_and_the_older_endpoint_agrees(client: ollama.Client) -> None:
    texts = ["A cat sits on the mat", "A kitten is resting on a rug", "Stock markets fell sharply today"]
    result = client.embed(model=DEFAULT_EMBEDDING_MODEL_ID, input=texts)
    vectors = np.array(result.embeddings, dtype=np.float32)
    assert vectors.shape == (3, 384) and np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert float(vectors[0] @ vectors[1]) > float(vectors[0] @ vectors[2])
    assert result.prompt_eval_count == 24
    older = client.embeddings(model=DEFAULT_EMBEDDING_MODEL_ID, prompt=texts[0])
    assert np.allclose(np.array(older.embedding), vectors[0], atol=1e-5)


def test_bad_requests_get_clear_errors_in_ollama_shape(
    client: ollama.Client, inference_server: ServerProcess
) -> None:
    with pytest.raises(ollama.ResponseError, match="GET /api/tags lists them") as unknown:
        client.chat(model="no-such-model", messages=HELLO)
    assert unknown.value.status_code == 404
    with pytest.raises(ollama.ResponseError, match=r"options\.temperature") as options:
        client.chat(model=SMOL, messages=HELLO, options={"temperature": "hot"})
    assert options.value.status_code == 400
    with pytest.raises(ollama.ResponseError, match="keep_alive 'soon' is not a duration") as keep_alive:
        client.generate(model=SMOL, prompt="hi", keep_alive="soon")
    assert keep_alive.value.status_code == 400
    with pytest.raises(ollama.ResponseError, match="cannot read images") as image:
        client.chat(model=SMOL, messages=[{"role": "user", "content": "What is it?", "images": [RED_PNG]}])
    assert image.value.status_code == 400
    response = httpx.post(
        f"{inference_server.url}/api/chat",
        content=b'{"model": "x",',
        headers={"Content-Type": "application/json"},
    )
    assert response.status_code == 400 and "not valid JSON" in response.json()["error"]


# --- Guards, keys and audit rows, on the apps in this process (no model loaded) ---


@pytest.fixture
def server(home: Path) -> Iterator[TestClient]:
    with standalone_server({}) as app:
        yield app


def test_a_web_page_cannot_use_the_api(server: TestClient) -> None:
    """The browser rules of /v1: a cross-site page and a "simple" form POST are refused."""
    page = server.post("/api/chat", json={"model": SMOL}, headers={"Origin": "https://evil.example"})
    assert page.status_code == 403 and "Cross-site requests" in page.json()["error"]
    form = server.post("/api/generate", content=b'{"model": "x"}', headers={"Content-Type": "text/plain"})
    assert form.status_code == 415 and "application/json" in form.json()["error"]
    assert server.get("/api/no-such-route").json() == {"error": "Not Found"}


def test_api_keys_apply_as_on_v1(server: TestClient) -> None:
    with Session(get_engine()) as session:
        key = create_api_key(session, name="ci").secret
    refused = server.get("/api/tags")
    assert refused.status_code == 401 and "requires an API key" in refused.json()["error"]
    admitted = server.get("/api/tags", headers={"Authorization": f"Bearer {key}"})
    assert admitted.status_code == 200 and admitted.json() == {"models": []}


def test_requests_get_audit_rows_marked_ollama(server: TestClient) -> None:
    assert server.get("/api/version").json()["version"]
    assert server.post("/api/show", json={"model": "nope"}).status_code == 404
    assert (
        server.post("/api/chat", content=b"{", headers={"Content-Type": "application/json"}).status_code
        == 400
    )
    assert audit_service.flush()
    with Session(get_engine()) as session:
        rows = {row.endpoint: row for row in session.exec(select(AuditLog))}
    assert {row.protocol for row in rows.values()} == {"ollama"}
    assert rows["POST /api/show"].status == 404 and "not found" in (rows["POST /api/show"].error or "")
    assert rows["POST /api/chat"].status == 400 and "not valid JSON" in (rows["POST /api/chat"].error or "")


def test_the_manager_serves_the_api_at_api_with_the_same_guard(home: Path) -> None:
    from mlx_manager.main import create_app

    with TestClient(create_app()) as app:
        assert app.get("/api/version").status_code == 200
        page = app.post("/api/chat", json={"model": SMOL}, headers={"Origin": "https://evil.example"})
        assert page.status_code == 403 and "Cross-site requests" in page.json()["error"]
        assert (
            app.post("/api/show", json={"name": "nope"}).json()["error"].startswith("model 'nope' not found")
        )


def test_images_reach_a_vision_model(home: Path, tiny_vision_dir: Path) -> None:
    """Ollama's base64 images on the tiny random-weight Qwen2.5-VL: 112x112 pixels are 16 image
    tokens plus the two vision markers."""
    question = {"role": "user", "content": "What colour is it?"}
    body = {"model": VISION, "stream": False, "options": {"temperature": 0, "num_predict": 3}}
    with standalone_server({VISION: tiny_vision_dir}) as app:
        text_only = app.post("/api/chat", json={**body, "messages": [question]}).json()
        with_image = app.post(
            "/api/chat", json={**body, "messages": [{**question, "images": [RED_PNG]}]}
        ).json()
    assert with_image["done"] and with_image["prompt_eval_count"] == text_only["prompt_eval_count"] + 18


def test_a_stream_cut_at_its_deadline_ends_with_an_ndjson_error_line() -> None:
    line = stream_error_event({"type": "http", "path": "/api/chat", "root_path": ""}, "too slow")
    assert line.endswith(b"\n") and json.loads(line) == {"error": "too slow"}
