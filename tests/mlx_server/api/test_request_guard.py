"""The request guard on the standalone server: body limits while reading, CORS for listed origins."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from fastapi.testclient import TestClient

from mlx_server.api.request_guard import host_name
from mlx_server.config import MLXServerSettings, use_settings
from mlx_server.main import create_app
from mlx_server.schemas.limits import MAX_MESSAGES, MAX_TOOL_BYTES

ALLOWED = "https://app.example"
MB = 1024 * 1024


@pytest.fixture
def server(home: Path) -> Iterator[TestClient]:
    use_settings(MLXServerSettings(allowed_hosts=["testserver"], cors_origins=[ALLOWED], max_body_bytes=MB))
    with TestClient(create_app()) as client:
        yield client


def test_host_names_are_read_without_port_or_brackets() -> None:
    assert host_name("LocalHost:8080") == "localhost"
    assert host_name("[::1]:8000") == "::1"
    assert host_name("::1") == "::1"
    assert host_name("evil.example") == "evil.example"


def test_a_listed_origin_gets_its_preflight_and_allow_header(server: TestClient) -> None:
    preflight = server.options(
        "/v1/chat/completions",
        headers={"origin": ALLOWED, "access-control-request-method": "POST"},
    )
    assert preflight.status_code == 204
    assert preflight.headers["access-control-allow-origin"] == ALLOWED
    assert "authorization" in preflight.headers["access-control-allow-headers"]
    listed = server.get("/v1/models", headers={"origin": ALLOWED})
    assert listed.headers["access-control-allow-origin"] == ALLOWED
    other = server.get("/v1/models", headers={"origin": "https://other.example"})
    assert "access-control-allow-origin" not in other.headers


def test_a_body_over_the_limit_is_refused_from_its_length(server: TestClient) -> None:
    response = server.post(
        "/v1/chat/completions",
        content=b"{" + b" " * (2 * MB) + b"}",
        headers={"content-type": "application/json"},
    )
    assert response.status_code == 413
    assert f"larger than {MB} bytes" in response.json()["error"]["message"]
    anthropic = server.post(
        "/v1/messages", content=b" " * (2 * MB), headers={"content-type": "application/json"}
    )
    assert anthropic.status_code == 413 and anthropic.json()["type"] == "error"


def test_a_streamed_body_is_cut_off_while_it_is_read(server: TestClient) -> None:
    def chunks() -> Iterator[bytes]:  # no Content-Length: chunked, counted as it arrives
        yield b'{"model": "x", "messages": ['
        for _ in range(64):
            yield b'{"role": "user", "content": "' + b"a" * 64 * 1024 + b'"},'

    response = server.post(
        "/v1/chat/completions", content=chunks(), headers={"content-type": "application/json"}
    )
    assert response.status_code == 413
    assert response.json()["error"]["type"] == "invalid_request_error"


def _post_huge(port: int, size: int, chunked: bool) -> tuple[bytes, float]:
    """Send headers and up to `size` bytes of body while reading; the response and its time."""
    framing = b"Transfer-Encoding: chunked" if chunked else f"Content-Length: {size}".encode()
    head = b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
    block = b"x" * MB
    piece = f"{len(block):x}\r\n".encode() + block + b"\r\n" if chunked else block

    def send_body(sock: socket.socket) -> None:
        try:
            for _ in range(size // MB):
                sock.sendall(piece)
        except OSError:
            pass  # the server answered and closed: what we want

    started = time.monotonic()
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(head + framing + b"\r\n\r\n")
        sender = threading.Thread(target=send_body, args=(sock,), daemon=True)
        sender.start()
        response = sock.recv(65536)
        elapsed = time.monotonic() - started
        sock.shutdown(socket.SHUT_RDWR)
        sender.join(timeout=10)
    return response, elapsed


@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
def test_a_100_mb_body_gets_413_within_a_second_and_memory_stays_flat(
    live_server: str, chunked: bool
) -> None:
    port = int(live_server.rsplit(":", 1)[1])
    process = psutil.Process()
    _post_huge(port, 10 * MB, chunked)  # warm up the connection path once
    before = process.memory_info().rss
    response, elapsed = _post_huge(port, 100 * MB, chunked)
    after = process.memory_info().rss
    assert response.startswith(b"HTTP/1.1 413"), response[:200]
    assert elapsed < 1.0, elapsed
    assert after < before * 1.10, (before, after)
    framing = "chunked" if chunked else "Content-Length"
    print(f"\n100 MB body ({framing}): 413 in {elapsed:.3f} s, resident memory {after / before:.3f}x")


def test_too_many_messages_or_tools_or_a_huge_tool_is_a_clear_400(server: TestClient) -> None:
    one = {"role": "user", "content": "hi"}
    many = server.post("/v1/chat/completions", json={"model": "x", "messages": [one] * (MAX_MESSAGES + 1)})
    assert many.status_code == 400
    assert many.json()["error"]["param"] == "messages"
    assert f"at most {MAX_MESSAGES}" in many.json()["error"]["message"]
    tool = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}
    tools = server.post("/v1/chat/completions", json={"model": "x", "messages": [one], "tools": [tool] * 513})
    assert tools.status_code == 400 and tools.json()["error"]["param"] == "tools"
    huge = {"name": "f", "description": "d" * MAX_TOOL_BYTES, "input_schema": {"type": "object"}}
    body = {"model": "x", "max_tokens": 5, "messages": [one], "tools": [huge]}
    anthropic = server.post("/v1/messages", json=body)
    assert anthropic.status_code == 400 and anthropic.json()["type"] == "error"
    assert "tool 0 is" in anthropic.json()["error"]["message"]
