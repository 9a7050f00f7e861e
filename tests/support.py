"""Helpers shared by tests (fixtures live in conftest.py)."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Self

import httpx
import mlx.core as mx
import numpy as np

MLX_MANAGER = Path(sys.executable).parent / "mlx-manager"


def wait_for(condition: Callable[[], bool], timeout: float, what: str) -> None:
    """Until `condition()` holds; an AssertionError naming `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.05)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class LocalHTTPServer:
    """A ThreadingHTTPServer on a free port of `host`, served from a daemon thread while the
    `with` block runs (the local hub and image host build on it)."""

    def __init__(self, handler: type[BaseHTTPRequestHandler], host: str = "127.0.0.1") -> None:
        self._httpd = ThreadingHTTPServer((host, 0), handler)
        self._httpd.daemon_threads = True
        self.port = int(self._httpd.server_address[1])
        self._thread = threading.Thread(target=self._httpd.serve_forever, args=(0.05,), daemon=True)

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()


def copy_truncated(source: Path, target: Path, size: int) -> Path:
    with source.open("rb") as src, target.open("wb") as dst:
        dst.write(src.read(size))
    return target


def llama_cpp_permute(weight: np.ndarray, n_heads: int) -> np.ndarray:
    """llama.cpp's convert_hf_to_gguf row permutation of Q/K (as documented there)."""
    rows = weight.shape[0]
    return (
        weight.reshape(n_heads, 2, rows // n_heads // 2, *weight.shape[1:])
        .swapaxes(1, 2)
        .reshape(weight.shape)
    )


def write_tiny_llama_gguf(path: Path, hf_weights: dict[str, np.ndarray], meta: dict[str, Any]) -> Path:
    """Write a float32 llama GGUF from Hugging Face-named weights, the way llama.cpp names them."""
    heads, kv_heads = int(meta["llama.attention.head_count"]), int(meta["llama.attention.head_count_kv"])
    parts = {
        "self_attn.q_proj": "attn_q",
        "self_attn.k_proj": "attn_k",
        "self_attn.v_proj": "attn_v",
        "self_attn.o_proj": "attn_output",
        "input_layernorm": "attn_norm",
        "mlp.gate_proj": "ffn_gate",
        "mlp.up_proj": "ffn_up",
        "mlp.down_proj": "ffn_down",
        "post_attention_layernorm": "ffn_norm",
    }
    top = {"model.embed_tokens": "token_embd", "model.norm": "output_norm", "lm_head": "output"}
    arrays: dict[str, mx.array] = {}
    for name, value in hf_weights.items():
        module = name.removesuffix(".weight")
        if module in top:
            gguf = top[module]
        else:
            _, _, layer, *rest = module.split(".")
            gguf = f"blk.{layer}.{parts['.'.join(rest)]}"
        if module.endswith("q_proj"):
            value = llama_cpp_permute(value, heads)
        elif module.endswith("k_proj"):
            value = llama_cpp_permute(value, kv_heads)
        arrays[f"{gguf}.weight"] = mx.array(value)
    mx.save_gguf(str(path), arrays, meta)
    return path


def register_in_home(home: Path, models: dict[str, Path]) -> None:
    """Migrate `home`'s database and register model directories by id, in a child process (this
    process's settings and engine belong to the test that runs)."""
    script = (
        "import json, sys\n"
        "from pathlib import Path\n"
        "from sqlmodel import Session\n"
        "from mlx_server.database import get_engine, upgrade_database\n"
        "from mlx_server.records import ModelRecord, ModelSource\n"
        "upgrade_database()\n"
        "with Session(get_engine()) as session:\n"
        "    for model_id, path in json.loads(sys.argv[1]).items():\n"
        "        session.add(ModelRecord(id=model_id, source=ModelSource.LOCAL, path=path))\n"
        "    session.commit()\n"
    )
    env = {**os.environ, "MLX_MANAGER_HOME": str(home)}
    env.pop("MLX_SERVER_HOME", None)
    paths = json.dumps({model_id: str(path) for model_id, path in models.items()})
    subprocess.run([sys.executable, "-c", script, paths], env=env, check=True)


@contextmanager
def uvicorn_server(app: Any) -> Iterator[str]:
    """`app` served by a real uvicorn on a loopback port (a thread) while the block runs; yields
    its base URL."""
    import uvicorn

    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "uvicorn did not start within 30 s"
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)


class ServerProcess:
    """`mlx-manager serve` as a user runs it: a real process on a loopback port."""

    def __init__(self, home: Path, log: Path, env: dict[str, str] | None = None) -> None:
        self.home = home
        self.log = log
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.env = {**os.environ, "MLX_MANAGER_HOME": str(home), **(env or {})}
        self.env.pop("MLX_SERVER_HOME", None)
        self.process: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 120) -> dict[str, Any]:
        """Start and wait for a healthy /health; returns its body."""
        with self.log.open("ab") as out:
            self.process = subprocess.Popen(
                [str(MLX_MANAGER), "serve", "--port", str(self.port)],
                env=self.env,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.process.poll() is None, f"serve exited early:\n{self.log.read_text()}"
            try:
                response = httpx.get(f"{self.url}/health", timeout=2)
                if response.status_code == 200:
                    body: dict[str, Any] = response.json()
                    return body
            except httpx.TransportError:
                pass
            time.sleep(0.25)
        raise AssertionError(f"no healthy answer within {timeout} s:\n{self.log.read_text()}")

    def settle(self, timeout: float = 300) -> None:
        """Wait for the probes `serve` runs once it has imported the default models (they load and
        unload models, which a test of the pool must not see half-way)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            log = self.log.read_text(errors="replace")
            imported = re.findall(r"imported default model (\S+) into", log)
            if all(f"mlx_manager.probe: probed {model_id}:" in log for model_id in imported):
                return
            assert self.process is not None and self.process.poll() is None, f"serve exited:\n{log[-3000:]}"
            time.sleep(0.5)
        raise AssertionError(f"the first probes did not end within {timeout} s:\n{log[-3000:]}")

    def stop(self) -> None:
        """Stop gracefully (SIGTERM); fails if the process crashed on the way out."""
        assert self.process is not None
        self.process.terminate()
        try:
            code = self.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=10)
            raise AssertionError(f"serve ignored SIGTERM for 20 s:\n{self.log.read_text()[-3000:]}") from None
        # uvicorn re-raises the SIGTERM it handled once shut down; anything else (an abort, -6) is a crash.
        assert code in (0, -signal.SIGTERM), f"serve exited with {code}:\n{self.log.read_text()[-3000:]}"


def csrf_headers(client: Any) -> dict[str, str]:
    """The header a dashboard page's htmx would send (after a GET sets the cookie)."""
    if "mlx_csrf" not in client.cookies:
        client.get("/")
    return {"X-CSRF-Token": client.cookies["mlx_csrf"]}


def store_exchange(models: dict[str, Path], reply: str, chat_model: str = "smol") -> tuple[int, int, int]:
    """Register `models` (id -> directory) and store a conversation with `chat_model`: a question
    and `reply`. Returns the conversation's, the question's and the reply's ids."""
    from sqlmodel import Session

    from mlx_manager.services.conversations import add_message, create_conversation
    from mlx_server.database import get_engine, upgrade_database
    from mlx_server.records import ModelRecord, ModelSource

    upgrade_database()
    with Session(get_engine()) as session:
        for model_id, path in models.items():
            session.add(ModelRecord(id=model_id, source=ModelSource.LOCAL, path=str(path)))
        session.commit()
        conversation = create_conversation(session, model_id=chat_model)
        question = add_message(session, conversation, "user", "Say hello.")
        answer = add_message(session, conversation, "assistant", reply)
        session.commit()
        assert conversation.id and question.id and answer.id
        return conversation.id, question.id, answer.id
