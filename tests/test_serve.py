"""`mlx-manager serve` as a user runs it: a real process on a loopback port."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import httpx

from mlx_server.models.store import DEFAULT_MODEL_ID
from tests.support import free_port

MLX_MANAGER = Path(sys.executable).parent / "mlx-manager"


def _serve(home: Path, port: int, log: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, "MLX_MANAGER_HOME": str(home)}
    with log.open("ab") as out:
        return subprocess.Popen(
            [str(MLX_MANAGER), "serve", "--port", str(port)], env=env, stdout=out, stderr=subprocess.STDOUT
        )


def _wait_healthy(
    process: subprocess.Popen[bytes], url: str, log: Path, timeout: float = 120
) -> dict[str, object]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert process.poll() is None, f"serve exited early:\n{log.read_text()}"
        try:
            response = httpx.get(f"{url}/health", timeout=2)
            if response.status_code == 200:
                body: dict[str, object] = response.json()
                return body
        except httpx.TransportError:
            pass
        time.sleep(0.25)
    raise AssertionError(f"no healthy answer within {timeout} s:\n{log.read_text()}")


def _stop(process: subprocess.Popen[bytes]) -> None:
    process.terminate()
    try:
        process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=10)


def test_serve_imports_the_default_model_once(home: Path, tmp_path: Path) -> None:
    log = tmp_path / "serve.log"
    port = free_port()
    url = f"http://127.0.0.1:{port}"

    first = _serve(home, port, log)
    try:
        health = _wait_healthy(first, url, log)
        assert health["models"] == 1
        assert httpx.get(f"{url}/v1/health").json()["models"] == 1
        assert DEFAULT_MODEL_ID in httpx.get(f"{url}/models").text
    finally:
        _stop(first)
    assert log.read_text().count("imported default model") == 1
    model_dir = home / "models" / DEFAULT_MODEL_ID
    first_import = model_dir.stat().st_mtime_ns

    second = _serve(home, port, log)
    try:
        assert _wait_healthy(second, url, log)["models"] == 1
    finally:
        _stop(second)
    assert log.read_text().count("imported default model") == 1
    assert [p.name for p in (home / "models").iterdir()] == [DEFAULT_MODEL_ID]
    assert model_dir.stat().st_mtime_ns == first_import
