"""Remote backends end to end: a second `mlx-server` process (its own home and port, SmolLM2
registered as "smol") is a backend of the app under test (the manager, on a loopback port).
Requests through the OpenAI and Anthropic SDKs reach it; killing it opens the circuit and the
rule falls back to the local model; restarting it lets the half-open probe close the circuit;
killing it mid-stream ends the stream with an error; a socket that never answers is cut by the
backend's read timeout."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
import pytest
from openai.types.chat import ChatCompletionToolParam
from sqlmodel import Session

from mlx_manager.records import MessageStatus
from mlx_manager.services.conversations import messages_of
from mlx_server.database import get_engine
from tests.mlx_server.api.conftest import register_models
from tests.support import csrf_headers, free_port

MLX_SERVER = Path(sys.executable).parent / "mlx-server"
SMOL = "smol"
TOOL: ChatCompletionToolParam = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather of a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}


class SecondServer:
    """`mlx-server serve` on its own home and port, with SmolLM2 registered as "smol"."""

    def __init__(self, home: Path, smollm_dir: Path) -> None:
        self.home, self.port = home, free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.env = {**os.environ, "MLX_SERVER_HOME": str(home), "MLX_SERVER_IDLE_TTL_SECONDS": "0"}
        self.env.pop("MLX_MANAGER_HOME", None)
        register = (
            "from tests.mlx_server.api.conftest import register_models; "
            f"register_models({{'smol': {str(smollm_dir)!r}}})"
        )
        subprocess.run([sys.executable, "-c", register], env=self.env, check=True, cwd=Path.cwd())
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with (self.home / "serve.log").open("ab") as log:
            self.process = subprocess.Popen(
                [str(MLX_SERVER), "serve", "--port", str(self.port)], env=self.env, stdout=log, stderr=log
            )
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            assert self.process.poll() is None, (self.home / "serve.log").read_text()
            try:
                if httpx.get(f"{self.url}/health", timeout=2).status_code == 200:
                    return
            except httpx.TransportError:
                time.sleep(0.1)
        raise AssertionError("the second server did not start within 120 s")

    def kill(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=10)

    def generations(self) -> list[dict[str, Any]]:
        """Its audit rows of generation requests, newest first."""
        return _generations(self.url)


@pytest.fixture(scope="module")
def second(tmp_path_factory: pytest.TempPathFactory, smollm_dir: Path) -> Iterator[SecondServer]:
    server = SecondServer(tmp_path_factory.mktemp("second-home"), smollm_dir)
    server.start()
    yield server
    if server.process is not None and server.process.poll() is None:
        server.process.terminate()
        server.process.wait(timeout=20)


@pytest.fixture
def breaker_settings(monkeypatch: pytest.MonkeyPatch, home: Path, smollm_dir: Path) -> None:
    """Two failures open a circuit, for three seconds; SmolLM2 is also the local "smol"."""
    monkeypatch.setenv("MLX_SERVER_REMOTE_BREAKER_FAILURES", "2")
    monkeypatch.setenv("MLX_SERVER_REMOTE_BREAKER_COOLDOWN_SECONDS", "3")
    register_models({SMOL: smollm_dir})


@pytest.fixture
def app(breaker_settings: None, live_server: str) -> Iterator[str]:
    from mlx_server.services.remote.breaker import reset_breakers

    yield live_server
    reset_breakers()


def _admin(app: str) -> httpx.Client:
    return httpx.Client(base_url=f"{app}/v1/admin", timeout=30)


def _add_backend(app: str, name: str, url: str, kind: str = "openai", **extra: Any) -> dict[str, Any]:
    response = _admin(app).post("/backends", json={"name": name, "kind": kind, "base_url": url, **extra})
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def _oai(app: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{app}/v1", api_key="x", max_retries=0, timeout=120)


def _generations(url: str) -> list[dict[str, Any]]:
    """The audit rows of generation requests, newest first (rows are written by a thread)."""
    time.sleep(0.3)
    rows: list[dict[str, Any]] = httpx.get(f"{url}/v1/admin/audit", timeout=10).json()["data"]
    return [r for r in rows if r["endpoint"] in ("POST /v1/chat/completions", "POST /v1/messages")]


def test_remote_model_is_listed_and_answered_by_the_second_server(app: str, second: SecondServer) -> None:
    shown = _add_backend(app, "mac2", f"{second.url}/v1", api_key="sk-secret-123456")
    assert shown["models"] == [SMOL] and shown["api_key_set"] is True and "api_key" not in shown
    assert "sk-secret" not in _admin(app).get("/backends").text
    listed = {m.id: m.owned_by for m in _oai(app).models.list()}
    assert listed["mac2/smol"] == "remote:mac2" and listed[SMOL] == "local"

    before = len(second.generations())
    reply = _oai(app).chat.completions.create(
        model="mac2/smol", messages=[{"role": "user", "content": "Say hi."}], max_tokens=4, temperature=0
    )
    assert reply.choices[0].message.content and reply.usage is not None and reply.usage.completion_tokens == 4
    chunks = list(
        _oai(app).chat.completions.create(
            model="mac2/smol",
            messages=[{"role": "user", "content": "Weather in Paris?"}],
            tools=[TOOL],
            tool_choice="required",
            max_tokens=40,
            stream=True,
            temperature=0,
        )
    )
    calls = [c for chunk in chunks for c in chunk.choices[0].delta.tool_calls or [] if chunk.choices]
    assert calls[0].function is not None and calls[0].function.name == "get_weather"
    arguments = "".join(c.function.arguments or "" for c in calls if c.function)
    assert "city" in json.loads(arguments)
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "tool_calls"

    claude = anthropic.Anthropic(base_url=app, api_key="x", max_retries=0, timeout=120)
    message = claude.messages.create(
        model="mac2/smol", max_tokens=4, messages=[{"role": "user", "content": "Say hi."}]
    )
    assert message.content[0].type == "text" and message.usage.output_tokens == 4

    assert _playground_reply(app, "mac2/smol")

    after = second.generations()
    remote_rows = after[: len(after) - before]
    assert [r["model"] for r in remote_rows] == [SMOL] * 4 and all(r["status"] == 200 for r in remote_rows)
    ours = [r for r in _generations(app) if r["model"] == "mac2/smol"]
    assert [r["backend"] for r in ours] == ["mac2"] * 3
    assert all(r["ttft_ms"] and r["completion_tokens"] for r in ours)


def _playground_reply(app: str, model: str) -> str:
    """A playground turn with `model` (picked from the chat page), its stored reply once done."""
    with httpx.Client(base_url=app, timeout=30) as page:
        assert f'<option value="{model}" >{model} (remote)</option>' in page.get("/chat").text.replace(
            "  ", " "
        )
        models_page = page.get("/models").text
        assert f'<code>{model}</code> <span class="badge">remote</span>' in models_page
        form = {"model_id": model, "temperature": "0", "max_tokens": "4", "content": "Say hi."}
        sent = page.post("/chat/send", data=form, headers=csrf_headers(page), follow_redirects=False)
        assert sent.status_code == 303, sent.text
        conversation = int(sent.headers["location"].rsplit("/", 1)[1])
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        with Session(get_engine()) as session:
            reply = next((m for m in messages_of(session, conversation) if m.role == "assistant"), None)
        if reply is not None and reply.status == MessageStatus.DONE:
            return reply.content
        time.sleep(0.2)
    raise AssertionError(f"no finished playground reply: {reply}")


def test_an_anthropic_kind_backend_is_reached_through_the_messages_api(
    app: str, second: SecondServer
) -> None:
    assert _add_backend(app, "mac2a", second.url, kind="anthropic")["models"] == [SMOL]
    stream = _oai(app).chat.completions.create(
        model="mac2a/smol",
        messages=[{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Say hi."}],
        max_tokens=5,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    finish = next(c.choices[0].finish_reason for c in reversed(chunks) if c.choices)
    usage = chunks[-1].usage
    assert text and usage is not None and usage.prompt_tokens > 5
    # The usage is the backend's own count, carried across protocols (SmolLM2 may end its greeting
    # before the limit: "Hello there." is 3 tokens and an end of turn on some paths' numerics).
    generation = second.generations()[0]
    assert generation["endpoint"] == "POST /v1/messages"
    assert usage.completion_tokens == generation["completion_tokens"]
    assert usage.completion_tokens == 5 if finish == "length" else 1 <= usage.completion_tokens < 5


def test_breaker_opens_falls_back_to_local_and_the_probe_closes_it(app: str, second: SecondServer) -> None:
    _add_backend(app, "mac2", f"{second.url}/v1")
    rule = {"pattern": "mac2/*", "targets": [{"backend": "mac2", "model": SMOL}, {"model": SMOL}]}
    assert _admin(app).post("/routing-rules", json=rule).status_code == 200
    ask = {"model": "mac2/smol", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2}
    assert _admin(app).post(f"/models/{SMOL}/load").status_code == 200  # the fallback, ready
    second.kill()
    try:
        for _ in range(3):  # two failures open the circuit; the third request skips it
            assert _oai(app).chat.completions.create(**ask).choices[0].message.content  # type: ignore[call-overload]
        state = _admin(app).get("/backends/mac2").json()["breaker"]
        assert state["state"] == "open" and state["consecutive_failures"] == 2
        assert "ConnectError" in state["last_error"]
        page = httpx.get(f"{app}/backends").text
        assert "mac2" in page and "open" in page
    finally:
        second.start()
    assert [r["backend"] for r in _generations(app)[:3]] == [None, None, None]  # the local model answered
    deadline = time.monotonic() + 5  # the rest of the cool-down
    while _admin(app).get("/backends/mac2").json()["breaker"]["state"] == "open":
        assert time.monotonic() < deadline
        time.sleep(0.1)
    assert _admin(app).get("/backends/mac2").json()["breaker"]["state"] == "half-open"
    _oai(app).chat.completions.create(**ask)  # type: ignore[call-overload]
    assert _admin(app).get("/backends/mac2").json()["breaker"]["state"] == "closed"
    assert _generations(app)[0]["backend"] == "mac2"


def test_killing_the_backend_mid_stream_ends_the_stream_with_an_error(app: str, second: SecondServer) -> None:
    _add_backend(app, "mac2", f"{second.url}/v1")
    ask = {"model": "mac2/smol", "messages": [{"role": "user", "content": "Tell a long story."}]}
    stream = _oai(app).chat.completions.create(**ask, max_tokens=400, stream=True)  # type: ignore[call-overload]
    received = []
    try:
        with pytest.raises(openai.APIError, match="failed after the reply had started"):
            for chunk in stream:
                received.append(chunk)
                if len(received) == 3:
                    second.kill()
    finally:
        second.start()
    assert 3 <= len(received) < 400
    row = _generations(app)[0]
    assert row["backend"] == "mac2" and "failed after the reply had started" in row["error"]


def test_a_backend_that_never_answers_is_cut_by_its_timeout(app: str) -> None:
    with socket.socket() as silent:  # accepts connections (the backlog), never reads or answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        url = f"http://127.0.0.1:{silent.getsockname()[1]}/v1"
        refused = _admin(app).post(
            "/backends", json={"name": "silent", "kind": "openai", "base_url": url, "read_timeout_s": 0.5}
        )
        assert refused.status_code == 502 and "ReadTimeout" in refused.json()["error"]["message"]
        started = time.monotonic()
        answer = httpx.post(
            f"{app}/v1/chat/completions",
            json={"model": "silent/anything", "messages": [{"role": "user", "content": "Hi"}]},
            timeout=30,
        )
        assert time.monotonic() - started < 5
    assert answer.status_code == 503 and int(answer.headers["retry-after"]) >= 1
    assert "silent (backend 'silent': ReadTimeout" in answer.json()["error"]["message"]
