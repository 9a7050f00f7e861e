"""A model served by two ranks on this machine (MLX's ring backend over loopback), through
`mlx-manager serve` as a user runs it: the tiny random 4-head llama sharded by tensor
parallelism answers greedy chat (streamed and not) token for token as the same weights loaded
in one process do, and speaks every protocol; a rank killed mid-stream ends the stream with an
error within the collective timeout and makes the model "degraded" (503 naming the node) until
a restart; no rank process outlives its group. One group, started once for the module."""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest

from tests.support import ServerProcess, register_in_home, wait_for

# Small, so that a test of a stuck group ends fast; a forward of the tiny model takes ~ms.
TIMEOUT_S = 5
QUESTION = [{"role": "user", "content": "Name three colours."}]
# Every rank process the tests saw: none may outlive the module's server.
SEEN_RANKS: set[psutil.Process] = set()


@pytest.fixture(scope="module")
def server(
    tmp_path_factory: pytest.TempPathFactory, tiny_draft_dirs: dict[str, Path]
) -> Iterator[ServerProcess]:
    home = tmp_path_factory.mktemp("sharded-home")
    tiny = tiny_draft_dirs["tiny"]
    register_in_home(home, {"tiny": tiny, "tiny-local": tiny})
    env = {
        "MLX_SERVER_IDLE_TTL_SECONDS": "0",
        "MLX_MANAGER_IMPORT_DEFAULT_MODEL": "false",
        "MLX_SERVER_DISTRIBUTED_TIMEOUT_S": str(TIMEOUT_S),
    }
    process = ServerProcess(home, home / "serve.log", env=env)
    process.start()
    try:
        started = httpx.post(
            f"{process.url}/v1/admin/sharded", json={"model": "tiny", "ranks": 2}, timeout=300
        )
        assert started.status_code == 200, started.text
        # Seen now, whichever of this module's tests this worker runs (xdist hands them out one
        # by one: a worker given only tests that stop the group saw no rank before teardown).
        assert _ranks(process)
        yield process
        _ranks(process)
    finally:
        process.stop()
    # The server's shutdown ended its ranks: none of those seen is left, reparented or not.
    assert SEEN_RANKS
    wait_for(lambda: not any(_alive(rank) for rank in SEEN_RANKS), 10, "every rank seen gone")


def _alive(process: psutil.Process) -> bool:
    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


@pytest.fixture
def group(server: ServerProcess) -> ServerProcess:
    """The server with its group ready: a test that degraded it may have run before (under
    xdist the order is not the file's)."""
    groups = httpx.get(f"{server.url}/v1/admin/sharded").json()["data"]
    if not groups:  # stopped by a test
        started = httpx.post(
            f"{server.url}/v1/admin/sharded", json={"model": "tiny", "ranks": 2}, timeout=300
        )
        assert started.status_code == 200, started.text
    elif groups[0]["state"] != "ready":
        restarted = httpx.post(f"{server.url}/v1/admin/sharded/tiny/restart", timeout=300)
        assert restarted.status_code == 200, restarted.text
    return server


def _ranks(server: ServerProcess) -> list[psutil.Process]:
    """The server's rank workers still running (its children running mlx_server.distributed.rank)."""
    assert server.process is not None
    try:
        children = psutil.Process(server.process.pid).children(recursive=True)
    except psutil.NoSuchProcess:
        children = []
    found = []
    for child in children:
        try:
            if (
                "mlx_server.distributed.rank" in " ".join(child.cmdline())
                and child.status() != psutil.STATUS_ZOMBIE
            ):
                found.append(child)
                SEEN_RANKS.add(child)
        except psutil.NoSuchProcess:
            pass
    return found


def _chat(server: ServerProcess, model: str, **extra: Any) -> httpx.Response:
    body = {"model": model, "messages": QUESTION, "max_tokens": 12, "temperature": 0, **extra}
    return httpx.post(f"{server.url}/v1/chat/completions", json=body, timeout=120)


def _streamed_text(server: ServerProcess, model: str) -> str:
    body = {"model": model, "messages": QUESTION, "max_tokens": 12, "temperature": 0, "stream": True}
    text = ""
    with httpx.stream("POST", f"{server.url}/v1/chat/completions", json=body, timeout=120) as response:
        assert response.status_code == 200
        for line in response.iter_lines():
            if line.startswith("data: ") and line != "data: [DONE]":
                chunk = json.loads(line[len("data: ") :])
                text += chunk["choices"][0]["delta"].get("content") or "" if chunk["choices"] else ""
    return text


def test_sharded_greedy_chat_equals_one_process_token_for_token(group: ServerProcess) -> None:
    server = group
    local = _chat(server, "tiny-local", logprobs=True).json()
    sharded = _chat(server, "tiny", logprobs=True).json()
    tokens = [t["token"] for t in sharded["choices"][0]["logprobs"]["content"]]
    assert tokens == [t["token"] for t in local["choices"][0]["logprobs"]["content"]]
    assert len(tokens) == 12 and sharded["choices"][0]["message"] == local["choices"][0]["message"]
    assert (
        _streamed_text(server, "tiny")
        == _streamed_text(server, "tiny-local")
        == local["choices"][0]["message"]["content"]
    )
    # The next request with the same prompt reuses the prefix the ranks' KV caches still hold.
    again = _chat(server, "tiny").json()
    assert again["usage"]["prompt_tokens_details"]["cached_tokens"] > 0
    assert again["choices"][0]["message"] == local["choices"][0]["message"]
    # Listed like a local model, marked sharded (OpenAI and Ollama listings).
    listed = {m["id"]: m for m in httpx.get(f"{server.url}/v1/models").json()["data"]}
    assert listed["tiny"]["sharded"] == {"strategy": "tensor", "ranks": 2, "nodes": ["127.0.0.1"]}
    assert "sharded" not in listed["tiny-local"]
    tags = {m["name"]: m for m in httpx.get(f"{server.url}/api/tags").json()["models"]}
    assert tags["tiny"]["sharded"]["ranks"] == 2


def test_anthropic_responses_and_json_schema_work_on_the_sharded_model(group: ServerProcess) -> None:
    server = group
    message = httpx.post(
        f"{server.url}/v1/messages",
        json={"model": "tiny", "max_tokens": 8, "messages": QUESTION, "temperature": 0},
        timeout=120,
    )
    assert message.status_code == 200, message.text
    assert message.json()["content"][0]["type"] == "text" and message.json()["usage"]["output_tokens"] == 8
    response = httpx.post(
        f"{server.url}/v1/responses",
        json={"model": "tiny", "input": "Name three colours.", "max_output_tokens": 8, "temperature": 0},
        timeout=120,
    )
    assert response.status_code == 200, response.text
    assert response.json()["status"] in ("completed", "incomplete") and response.json()["output"]
    schema = {"type": "object", "properties": {"colour": {"type": "string"}}, "required": ["colour"]}
    format_ = {"type": "json_schema", "json_schema": {"name": "colour", "schema": schema}}
    constrained = _chat(server, "tiny", response_format=format_, max_tokens=40).json()
    assert isinstance(json.loads(constrained["choices"][0]["message"]["content"])["colour"], str)


def test_requests_take_turns_and_a_client_that_leaves_frees_the_model(group: ServerProcess) -> None:
    server = group
    expected = _chat(server, "tiny-local").json()["choices"][0]["message"]
    with ThreadPoolExecutor(2) as pool:  # two at once: the second waits its turn, neither is garbled
        answers = list(pool.map(lambda _: _chat(server, "tiny").json()["choices"][0]["message"], range(2)))
    assert answers == [expected, expected]
    body = {"model": "tiny", "messages": QUESTION, "max_tokens": 1500, "temperature": 0, "stream": True}
    with httpx.stream("POST", f"{server.url}/v1/chat/completions", json=body, timeout=120) as response:
        next(line for line in response.iter_lines() if line.startswith("data: "))  # then the client leaves
    assert _chat(server, "tiny").json()["choices"][0]["message"] == expected


def _kill_rank_one(server: ServerProcess) -> None:
    rank_one = [p for p in _ranks(server) if "--control-fd" not in p.cmdline()]
    assert len(rank_one) == 1
    os.kill(rank_one[0].pid, signal.SIGKILL)


def test_a_killed_rank_degrades_the_model_until_a_restart(group: ServerProcess) -> None:
    server = group
    body = {"model": "tiny", "messages": QUESTION, "max_tokens": 1500, "temperature": 0, "stream": True}
    events: list[str] = []
    with httpx.stream("POST", f"{server.url}/v1/chat/completions", json=body, timeout=120) as response:
        lines = response.iter_lines()
        events.append(next(line for line in lines if line.startswith("data: ")))
        _kill_rank_one(server)
        killed_at = time.monotonic()
        events += [line for line in lines if line.startswith("data: ")]
        ended_after = time.monotonic() - killed_at
    print(f"the stream ended {ended_after:.2f} s after the kill")
    assert ended_after < TIMEOUT_S + 2, ended_after
    assert any('"error"' in event for event in events[1:]), events[-3:]
    later = _chat(server, "tiny")
    assert later.status_code == 503 and "Retry-After" in later.headers
    assert "node 127.0.0.1" in later.json()["error"]["message"]
    status = httpx.get(f"{server.url}/v1/admin/sharded").json()["data"][0]
    assert status["state"] == "degraded" and status["failed_node"] == "127.0.0.1"
    assert "killed by SIGKILL" in status["failure"]
    assert _chat(server, "tiny-local").status_code == 200  # nothing else on the node is affected
    wait_for(lambda: _ranks(server) == [], 10, "no rank left")  # the survivor was ended with its group

    restarted = httpx.post(f"{server.url}/v1/admin/sharded/tiny/restart", timeout=300)
    assert restarted.status_code == 200 and restarted.json()["state"] == "ready"
    assert (
        _chat(server, "tiny").json()["choices"][0]["message"]
        == _chat(server, "tiny-local").json()["choices"][0]["message"]
    )
    assert len(_ranks(server)) == 2


def test_a_rank_that_stops_answering_fails_the_request_within_the_timeout(group: ServerProcess) -> None:
    server = group
    rank_one = next(p for p in _ranks(server) if "--control-fd" not in p.cmdline())
    os.kill(rank_one.pid, signal.SIGSTOP)  # alive, but silent: rank 0 waits in a collective
    started = time.monotonic()
    stuck = _chat(server, "tiny")
    print(f"the request failed {time.monotonic() - started:.2f} s after it was sent")
    assert time.monotonic() - started < TIMEOUT_S + 3
    assert (
        stuck.status_code == 503
        and f"did not answer within {TIMEOUT_S} s" in stuck.json()["error"]["message"]
    )
    # The stopped rank too (SIGKILL after the grace period).
    wait_for(lambda: _ranks(server) == [], 10, "no rank left")
    assert _chat(server, "tiny-local").status_code == 200


def test_stopping_serves_the_model_from_one_process_again(server: ServerProcess) -> None:
    # Ready or degraded (by the test before it in the file's order), the group stops.
    stopped = httpx.delete(f"{server.url}/v1/admin/sharded/tiny", timeout=60)
    assert stopped.status_code == 200 and stopped.json()["state"] == "stopped"
    wait_for(lambda: _ranks(server) == [], 10, "no rank left")
    assert httpx.get(f"{server.url}/v1/admin/sharded").json()["data"] == []
    listed = {m["id"]: m for m in httpx.get(f"{server.url}/v1/models").json()["data"]}
    assert "sharded" not in listed["tiny"]
    assert (
        _chat(server, "tiny").json()["choices"][0]["message"]
        == _chat(server, "tiny-local").json()["choices"][0]["message"]
    )
    assert httpx.delete(f"{server.url}/v1/admin/sharded/tiny").status_code == 404
