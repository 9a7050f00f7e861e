"""Load and faults (issue 18): a burst of 200 requests all answered and audited; kill -9 of a real
`mlx-manager serve` in the middle of requests, a stream, new conversations and a settings save
loses nothing it acknowledged (every answered request has its audit row; the cut stream's shows
as interrupted after the restart) and leaves a sound database; one server per home."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sqlite3
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
from sqlmodel import Session, select

from mlx_server.database import get_engine, upgrade_database
from mlx_server.home_lock import HomeInUse, lock_home
from mlx_server.records import AuditLog, ModelRecord, ModelSource
from tests.support import MLX_MANAGER, ServerProcess, csrf_headers, free_port

BURST = 200
MAX_PENDING = 4
ENOUGH = 3  # acknowledgements of each kind before the kill
ONE_TOKEN = {"model": "smol", "prompt": "Hi", "max_tokens": 1}


@pytest.fixture
def smol_home(home: Path, smollm_dir: Path) -> Path:
    """The home's database with SmolLM2 registered as "smol" (no default-model import)."""
    upgrade_database()
    with Session(get_engine()) as session:
        session.add(ModelRecord(id="smol", source=ModelSource.LOCAL, path=str(smollm_dir)))
        session.commit()
    return home


async def _burst(url: str, count: int) -> list[httpx.Response | BaseException]:
    """`count` requests at once, each on its own connection."""
    limits = httpx.Limits(max_connections=count, max_keepalive_connections=0)
    async with httpx.AsyncClient(base_url=url, limits=limits, timeout=120) as client:
        requests = [client.post("/v1/completions", json=ONE_TOKEN) for _ in range(count)]
        return await asyncio.gather(*requests, return_exceptions=True)


def _audit_rows(request_ids: set[str], timeout: float = 30) -> list[AuditLog]:
    """The audit rows of these requests, waiting (bounded) for the writer thread."""
    deadline = time.monotonic() + timeout
    while True:
        with Session(get_engine()) as session:
            rows = list(session.exec(select(AuditLog).where(AuditLog.endpoint == "POST /v1/completions")))
        if {row.request_id for row in rows} >= request_ids or time.monotonic() > deadline:
            return rows
        time.sleep(0.2)


@pytest.fixture
def small_queue(smol_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """At most MAX_PENDING generations admitted: the rest of a burst is told to retry at once."""
    monkeypatch.setenv("MLX_SERVER_MAX_PENDING_REQUESTS", str(MAX_PENDING))


def test_200_simultaneous_requests_are_all_answered_and_audited(small_queue: None, live_server: str) -> None:
    url = live_server
    started = time.monotonic()
    answers = asyncio.run(_burst(url, BURST))
    elapsed = time.monotonic() - started
    failures = [a for a in answers if isinstance(a, BaseException)]
    assert not failures, f"{len(failures)} connection errors, first: {failures[0]!r}"
    responses = [a for a in answers if isinstance(a, httpx.Response)]
    statuses = sorted({r.status_code for r in responses})
    assert set(statuses) <= {200, 429, 503}, statuses
    served = [r for r in responses if r.status_code == 200]
    told_to_retry = [r for r in responses if r.status_code != 200]
    assert served, "no request was served"
    assert all(r.headers.get("retry-after", "").isdigit() for r in told_to_retry)
    assert all(r.json()["error"]["code"] == "server_busy" for r in told_to_retry)
    request_ids = {r.headers["x-request-id"] for r in responses}
    assert len(request_ids) == BURST
    rows = _audit_rows(request_ids)
    assert sorted(row.request_id for row in rows) == sorted(request_ids)  # one row each, no more
    by_id = {r.headers["x-request-id"]: r.status_code for r in responses}
    assert all(row.status == by_id[row.request_id] for row in rows)
    pool = httpx.get(f"{url}/v1/admin/pool").json()
    assert (pool["pending_requests"], pool["max_pending_requests"]) == (0, MAX_PENDING)
    print(f"\n{BURST} requests in {elapsed:.1f} s: {len(served)} served, {len(told_to_retry)} told to retry")


class Traffic:
    """Clients that keep a server busy and note what it acknowledged, until told to stop."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.answered: list[str] = []  # x-request-id of /v1 requests answered 200
        self.audited: set[str] = set()  # request ids of audit rows the server had written
        self.conversations: list[int] = []  # created, the 303 received
        self.saved_max_tokens = 0  # the last settings save answered 303
        self.refused: dict[int, int] = {}  # /v1 answers other than 200, by status
        self.errors: list[str] = []  # answers that were neither acknowledgements nor refusals
        self.saving = threading.Event()  # a settings save sent and not yet answered
        self.cut_off: list[str] = []  # the clients whose request the kill left unanswered
        self.streaming: list[str] = []  # x-request-id of a long stream acknowledged (its 200 read)
        self.threads = [
            threading.Thread(target=self._stream),
            *(threading.Thread(target=self._requests) for _ in range(3)),
            threading.Thread(target=self._conversations),
            threading.Thread(target=self._settings),
            threading.Thread(target=self._audit),
        ]

    def _loop(self, step: Callable[[httpx.Client], None]) -> None:
        with httpx.Client(base_url=self.url, timeout=30, follow_redirects=False) as client:
            while not self.stop.is_set():
                try:
                    step(client)
                except httpx.TransportError:
                    self.cut_off.append(step.__qualname__.split(".")[1])
                    return  # the server was killed
                except AssertionError as exc:
                    self.errors.append(str(exc))
                    return

    def _requests(self) -> None:
        def step(client: httpx.Client) -> None:
            response = client.post("/v1/completions", json=ONE_TOKEN)
            with self.lock:
                if response.status_code == 200:
                    self.answered.append(response.headers["x-request-id"])
                else:
                    self.refused[response.status_code] = self.refused.get(response.status_code, 0) + 1

        self._loop(step)

    def _stream(self) -> None:
        """One stream far longer than the test, acknowledged (200 and a first chunk) before the
        kill, which cuts it: its audit row must survive, interrupted."""

        def step(client: httpx.Client) -> None:
            # SmolLM2's special tokens banned: the stream cannot end by itself before the kill.
            bias = {0: -100, 1: -100, 2: -100}
            body = {**ONE_TOKEN, "max_tokens": 2000, "stream": True, "logit_bias": bias}
            with client.stream("POST", "/v1/completions", json=body) as response:
                assert response.status_code == 200, response.read()
                chunks = response.iter_raw()
                next(chunks)
                self.streaming.append(response.headers["x-request-id"])
                for _ in chunks:
                    pass
            raise AssertionError("the long stream ended before the kill")

        self._loop(step)

    def _conversations(self) -> None:
        def step(client: httpx.Client) -> None:
            while len(self.answered) < ENOUGH and not self.stop.wait(0.1):
                pass  # their replies hold the MLX thread: the /v1 requests first
            form = {"model_id": "smol", "content": "Hi", "max_tokens": "1"}
            response = client.post("/chat/send", data=form, headers=csrf_headers(client))
            assert response.status_code == 303, response.text
            with self.lock:
                self.conversations.append(int(response.headers["location"].rsplit("/", 1)[1]))
            if len(self.conversations) >= ENOUGH:  # each starts a reply: leave the MLX thread to /v1
                self.stop.wait()

        self._loop(step)

    def _settings(self) -> None:
        def step(client: httpx.Client) -> None:
            value = self.saved_max_tokens + 1
            form = {"temperature": "0.5", "top_p": "0.9", "top_k": "40", "max_tokens": str(value)}
            headers = csrf_headers(client)
            self.saving.set()
            response = client.post(
                "/settings/generation", data={**form, "api_max_tokens": str(value)}, headers=headers
            )
            self.saving.clear()
            assert response.status_code == 303, response.text
            self.saved_max_tokens = value
            self.stop.wait(0.1)

        self._loop(step)

    def _audit(self) -> None:
        def step(client: httpx.Client) -> None:
            rows = client.get("/v1/admin/audit", params={"limit": 50}).json()["data"]
            with self.lock:
                self.audited.update(row["request_id"] for row in rows)
            self.stop.wait(0.2)

        self._loop(step)

    def __repr__(self) -> str:
        return (
            f"{len(self.answered)} answered, {len(self.conversations)} conversations, "
            f"save #{self.saved_max_tokens}, {len(self.audited)} audit rows seen, refused {self.refused}, "
            f"errors {self.errors}"
        )

    def busy(self) -> bool:
        """Whether each kind of write has been acknowledged at least a few times."""
        with self.lock:
            counts = (len(self.answered), len(self.conversations), self.saved_max_tokens, len(self.audited))
        return (min(counts) >= ENOUGH and bool(self.streaming)) or bool(self.errors)


def _wait(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"{what} within {timeout} s: {condition!r}"
        time.sleep(0.05)


def _start_second(home: Path) -> subprocess.Popen[str]:
    env = {**os.environ, "MLX_MANAGER_HOME": str(home), "MLX_MANAGER_IMPORT_DEFAULT_MODEL": "false"}
    command = [str(MLX_MANAGER), "serve", "--port", str(free_port())]
    return subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_kill_9_mid_traffic_loses_nothing_acknowledged_and_one_server_holds_a_home(
    smol_home: Path, tmp_path: Path
) -> None:
    env = {"MLX_MANAGER_IMPORT_DEFAULT_MODEL": "false", "MLX_SERVER_MAX_PENDING_REQUESTS": "8"}
    first = ServerProcess(smol_home, tmp_path / "first.log", env=env)
    first.start()
    assert first.process is not None
    second = _start_second(smol_home)  # while the first one is busy
    traffic = Traffic(first.url)
    for thread in traffic.threads:
        thread.start()
    try:
        refused = second.communicate(timeout=60)[1]
        assert second.returncode == 2, refused
        assert "another server is already running on the home" in refused
        assert f"pid {first.process.pid} serving http://127.0.0.1:{first.port}" in refused
        _wait(traffic.busy, 45, "requests, conversations, a settings save and audit rows acknowledged")
        _wait(traffic.saving.is_set, 10, "a settings save in flight")
    finally:
        if second.poll() is None:  # it started after all: the test fails, leave nothing behind
            second.kill()
            second.communicate()
        first.process.send_signal(signal.SIGKILL)  # mid-traffic: every client has a request in flight
        traffic.stop.set()
        for thread in traffic.threads:
            thread.join(timeout=30)
    assert first.process.wait(timeout=10) == -signal.SIGKILL
    assert not traffic.errors, traffic.errors
    # Killed mid-request: a reply takes far longer than the kill. A settings save takes a few ms,
    # so the kill, sent while one was in flight, can still land just after its answer (seen once
    # in CI); whether it cut one off is printed, and the checks below hold either way.
    assert "_requests" in traffic.cut_off and "_stream" in traffic.cut_off

    restarted = ServerProcess(smol_home, tmp_path / "restarted.log", env=env)
    restarted.start()  # the kernel released the dead server's lock: no stale lock
    try:
        _check_database(smol_home / "mlx-manager.db", traffic)
        assert httpx.get(f"{restarted.url}/v1/completions", timeout=5).status_code == 405  # serving
        # The cut stream: interrupted, with what it was, in the log and on its audit page.
        with sqlite3.connect(smol_home / "mlx-manager.db") as db:
            query = "SELECT id, state, status, model, stream FROM audit_log WHERE request_id = ?"
            (row_id, *cut) = db.execute(query, (traffic.streaming[0],)).fetchone()
        assert cut == ["interrupted", None, "smol", 1]
        assert ">interrupted</span>" in httpx.get(f"{restarted.url}/audit/{row_id}", timeout=10).text
    finally:
        restarted.stop()


def _check_database(path: Path, traffic: Traffic) -> None:
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        conversations = {row[0] for row in db.execute("SELECT id FROM conversations")}
        first_messages = {row[0] for row in db.execute("SELECT conversation_id FROM chat_messages")}
        states = dict(db.execute("SELECT request_id, state FROM audit_log").fetchall())
        overrides = dict(db.execute("SELECT key, value FROM setting_overrides").fetchall())
    audited = set(states)
    interrupted = {request_id for request_id, state in states.items() if state == "interrupted"}
    assert "in_flight" not in states.values()  # the restart marked what the kill left open
    assert set(traffic.conversations) <= conversations
    assert set(traffic.conversations) <= first_messages  # each with the message it was created with
    assert traffic.audited <= audited  # every row the server had written survived
    assert json.loads(overrides["chat_defaults"])["max_tokens"] >= traffic.saved_max_tokens
    assert json.loads(overrides["default_max_tokens"]) >= traffic.saved_max_tokens
    # Every acknowledged request has its row: written as it arrived, committed before its answer.
    assert set(traffic.answered) | set(traffic.streaming) <= audited
    print(
        f"\nacknowledged before kill -9: {len(traffic.answered)} /v1 requests and a stream, all audited; "
        f"{len(traffic.audited)} audit rows seen, {len(interrupted)} interrupted after the restart, "
        f"{len(traffic.conversations)} conversations, settings save #{traffic.saved_max_tokens}; "
        f"cut off in flight: {sorted(traffic.cut_off)}"
    )


def test_the_home_lock_names_its_holder_and_is_free_once_released(tmp_path: Path) -> None:
    held = lock_home(tmp_path, "http://127.0.0.1:8000", "MLX_SERVER_HOME")
    with pytest.raises(HomeInUse, match=f"pid {os.getpid()} serving http://127.0.0.1:8000") as refused:
        lock_home(tmp_path, "http://127.0.0.1:9000", "MLX_SERVER_HOME")
    assert "MLX_SERVER_HOME=" in str(refused.value)
    held.release()
    with lock_home(tmp_path, "http://127.0.0.1:9000", "MLX_SERVER_HOME"):
        assert (tmp_path / "serve.lock").read_text() == f"pid {os.getpid()} serving http://127.0.0.1:9000"
