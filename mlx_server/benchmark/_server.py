"""A real `mlx-manager serve` on a fresh home and a free loopback port, for benchmark runs."""

from __future__ import annotations

import http.client
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx

from mlx_server.models.store import DEFAULT_MODEL_ID


@dataclass(frozen=True)
class Run:
    """One timed generation: tokens, decode speed (first content to last), time to first token."""

    tokens: int
    decode_tps: float
    ttft_s: float
    shown_tps: float | None = None  # what the playground displays (its stats event)
    text: str = ""  # the reply (stream_chat), for conversations that go on
    accepted: int = 0  # tokens that came from drafts (usage's accepted_prediction_tokens)


def stream_chat(
    url: str,
    messages: list[dict[str, Any]],
    max_tokens: int,
    model: str = DEFAULT_MODEL_ID,
    extra: dict[str, Any] | None = None,
) -> Run:
    """A greedy streamed /v1/chat/completions, timed on the client (SSE parsing included).

    The client is the standard library's `http.client`, reading the event stream line by line:
    on this 2-core machine every cycle the client spends per chunk is taken from decoding, and
    httpx's line iterator costs about four times as much CPU per chunk (measured: ~1 ms against
    ~0.27 ms), which would be charged to the server being measured."""
    body = {
        "model": model,
        "messages": messages,
        "temperature": 0,
        "max_tokens": max_tokens,
        "stream": True,
        "stream_options": {"include_usage": True},
        **(extra or {}),
    }
    address = urlsplit(url)
    connection = http.client.HTTPConnection(address.hostname or "127.0.0.1", address.port, timeout=600)
    started = time.perf_counter()
    first = last = 0.0
    tokens = accepted = 0
    text: list[str] = []
    try:
        connection.request(
            "POST", "/v1/chat/completions", json.dumps(body), {"Content-Type": "application/json"}
        )
        response = connection.getresponse()
        if response.status != 200:
            raise RuntimeError(f"HTTP {response.status}: {response.read().decode(errors='replace')}")
        while line := response.readline():
            if not line.startswith(b"data: ") or line.startswith(b"data: [DONE]"):
                continue
            chunk = json.loads(line[6:])
            if chunk.get("usage"):
                tokens = chunk["usage"]["completion_tokens"]
                details = chunk["usage"].get("completion_tokens_details") or {}
                accepted = details.get("accepted_prediction_tokens") or 0
            elif chunk["choices"] and chunk["choices"][0]["delta"].get("content"):
                last = time.perf_counter()
                first = first or last
                text.append(chunk["choices"][0]["delta"]["content"])
    finally:
        connection.close()
    tps = (tokens - 1) / (last - first) if last > first else 0.0
    return Run(tokens, tps, first - started, text="".join(text), accepted=accepted)


def alternate(runs: int, **paths: Callable[[], Run]) -> dict[str, list[Run]]:
    """`runs` rounds of every path in turn, so drift affects them alike; the order rotates each
    round, so no path always runs right after the same other one. Prints each round."""
    results: dict[str, list[Run]] = {name: [] for name in paths}
    names = list(paths)
    for i in range(runs):
        shift = i % len(names)
        for name in names[shift:] + names[:shift]:
            results[name].append(paths[name]())
        rates = ", ".join(f"{name} {done[-1].decode_tps:.2f}" for name, done in results.items())
        print(f"run {i + 1}: {rates} tok/s")
    return results


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def running_server(home: Path, settings: dict[str, str] | None = None) -> Iterator[str]:
    """Serve from `home` (the default model is imported on first start), with `settings` as
    extra environment (e.g. MLX_SERVER_MAX_PENDING_REQUESTS); yields the base URL."""
    port = free_port()
    executable = Path(sys.executable).parent / "mlx-manager"
    env = {**os.environ, "MLX_MANAGER_HOME": str(home), **(settings or {})}
    env.pop("MLX_SERVER_HOME", None)
    with _serving([str(executable), "serve", "--port", str(port)], env, home / "serve.log", port) as (url, _):
        yield url


@contextmanager
def running_standalone(home: Path) -> Iterator[str]:
    """The standalone `mlx-server` on `home` (nothing imported: an empty home serves no model
    until one is registered or a remote backend is added); yields the base URL."""
    port = free_port()
    executable = Path(sys.executable).parent / "mlx-server"
    env = {**os.environ, "MLX_SERVER_HOME": str(home)}
    env.pop("MLX_MANAGER_HOME", None)
    home.mkdir(parents=True, exist_ok=True)
    with _serving([str(executable), "serve", "--port", str(port)], env, home / "serve.log", port) as (url, _):
        yield url


@contextmanager
def running_mlx_lm_server(model_dir: Path, log: Path, preload: str | None = None) -> Iterator[str]:
    """mlx-lm's own `mlx_lm.server` (this venv's) on `model_dir`, the reference; requests name
    the model "default_model". With `preload` (a library, e.g. libopenblas.so.0) it runs under
    LD_PRELOAD, and OpenBLAS must be mapped in its process; without, the system's
    OpenBLAS may not be (MLX's bundled BLAS, as users start it). It inherits this process's
    OPENBLAS_CORETYPE (utils/cpu_blas.py sets it), so both servers run the same kernels.
    Yields the base URL."""
    port = free_port()
    command = [sys.executable, "-m", "mlx_lm.server", "--model", str(model_dir), "--port", str(port)]
    env = dict(os.environ)
    env.pop("LD_PRELOAD", None)
    if preload:
        env["LD_PRELOAD"] = preload
    with _serving(command, env, log, port) as (url, process):
        maps = Path(f"/proc/{process.pid}/maps")
        # The system's OpenBLAS maps as .../libopenblas*.so (numpy's own libscipy_openblas64_
        # serves numpy only: its symbols are prefixed).
        openblas = "/libopenblas" in (maps.read_text() if maps.exists() else "")
        if preload and not openblas:
            raise SystemExit(f"LD_PRELOAD={preload} is not mapped in mlx_lm.server's process")
        if not preload and openblas:
            raise SystemExit("mlx_lm.server as shipped has OpenBLAS mapped: unset LD_PRELOAD")
        yield url


@contextmanager
def _serving(
    command: list[str], env: dict[str, str], log: Path, port: int
) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """Run `command` until it answers GET /health on `port`; stop it on exit. Yields the base
    URL and the process."""
    with log.open("wb") as out:
        process = subprocess.Popen(command, env=env, stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 300
        while True:
            if process.poll() is not None:
                raise SystemExit(f"the server exited:\n{log.read_text()}")
            try:
                if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise SystemExit("the server did not become healthy within 300 s")
            time.sleep(0.5)
        yield url, process
    finally:
        process.terminate()
        process.wait(timeout=30)
