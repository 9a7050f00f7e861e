"""Stress: many clients with random prompts, lengths and disconnects against a real server.

Each client sends /v1/chat/completions requests one after another for `--seconds`: a prompt of
random words and length, a random max_tokens, streamed or not, and about one in four is dropped
by the client on purpose (a stream closed after a few chunks, a plain request abandoned after a
random wait). A request refused with 503 must carry Retry-After, which the client then waits.
Every request has a deadline (`--deadline` s): one still unanswered then counts as hung. At the
end the server must drain (no generation left pending) and its audit log must hold one row per
request sent, every response's x-request-id among them. A request counts as sent once its bytes
went out (a plain request dropped before that, on a busy machine, never reached the server).

Invariants (the issue's acceptance): hung 0, other errors 0, audit rows = requests sent, none
still in flight once the server has drained.

    python -m mlx_server.benchmark.stress [--clients 50] [--seconds 120] [--seed 1]
        [--max_pending 16] [--deadline 300] [--write docs/benchmarks.md]
"""

from __future__ import annotations

import asyncio
import random
import tempfile
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx

from mlx_server.benchmark._server import running_server
from mlx_server.benchmark.report import bench_arguments, publish, run_line
from mlx_server.models.store import DEFAULT_MODEL_ID

MARKER_START = "<!-- stress-benchmark:start -->"
MARKER_END = "<!-- stress-benchmark:end -->"
ENDPOINT = "POST /v1/chat/completions"
WORDS = (
    "river",
    "mountain",
    "lamp",
    "violin",
    "orbit",
    "harbour",
    "lantern",
    "garden",
    "pepper",
    "comet",
    "meadow",
    "anchor",
    "glacier",
    "thunder",
    "pocket",
    "ladder",
    "window",
    "saddle",
    "marble",
    "candle",
    "engine",
    "forest",
    "puzzle",
    "rocket",
    "velvet",
)
DRAIN_SECONDS = 120  # how long the server may take to finish what is pending after the clients stop


@dataclass
class Tally:
    """What happened to the requests sent, and what the server recorded of them."""

    sent: int = 0
    completed: int = 0
    refused: int = 0  # 503 with Retry-After
    disconnected: int = 0  # dropped by the client on purpose, after the request went out
    unsent: int = 0  # dropped by the client before its request went out: the server never saw it
    hung: int = 0  # no answer within the deadline
    errors: list[str] = field(default_factory=list)
    request_ids: set[str] = field(default_factory=set)  # from the responses' x-request-id
    slowest_s: float = 0.0
    audit_rows: int = -1
    audit_missing: int = -1  # response ids with no audit row
    audit_open: int = -1  # rows still in flight once the server has drained (none should be)
    drained: bool = False

    @property
    def holds(self) -> bool:
        return (
            self.hung == 0
            and not self.errors
            and self.drained
            and self.audit_rows == self.sent
            and self.audit_missing == 0
            and self.audit_open == 0
        )


@dataclass(frozen=True)
class Plan:
    """One request: its body and when the client drops it (None: it reads to the end)."""

    body: dict[str, Any]
    drop_after_chunks: int | None
    drop_after_s: float | None


def plan(rng: random.Random, drop_rate: float = 0.25) -> Plan:
    stream = rng.random() < 0.7
    words = " ".join(rng.choices(WORDS, k=rng.randint(3, 60)))
    body = {
        "model": DEFAULT_MODEL_ID,
        "messages": [{"role": "user", "content": f"Tell a short story with these words: {words}"}],
        "max_tokens": rng.randint(1, 40),
        "temperature": rng.choice([0.0, 0.7]),
        "seed": rng.randint(0, 2**31),
        "stream": stream,
    }
    drop = rng.random() < drop_rate
    return Plan(
        body,
        rng.randint(1, 6) if drop and stream else None,
        rng.uniform(0.2, 4.0) if drop and not stream else None,
    )


class _Sent:
    """Whether a request's bytes went out (httpcore's trace events): only those reach the server
    (and its audit log); a drop can come earlier on a busy machine."""

    def __init__(self) -> None:
        self.written = False

    async def trace(self, event: str, info: dict[str, Any]) -> None:
        if event == "http11.send_request_body.complete":
            self.written = True


async def _send(client: httpx.AsyncClient, request: Plan, tally: Tally, sent: _Sent) -> float:
    """One request, to its end or the client's drop; returns the Retry-After to wait (0 if none)."""
    extensions = {"trace": sent.trace}
    async with client.stream(
        "POST", "/v1/chat/completions", json=request.body, extensions=extensions
    ) as response:
        if "x-request-id" in response.headers:
            tally.request_ids.add(response.headers["x-request-id"])
        if response.status_code == 503:
            await response.aread()
            retry_after = response.headers.get("retry-after")
            if retry_after is None:
                tally.errors.append("503 without Retry-After")
                return 0.0
            tally.refused += 1
            return float(retry_after)
        if response.status_code != 200:
            tally.errors.append(f"{response.status_code}: {(await response.aread())[:300]!r}")
            return 0.0
        chunks = 0
        async for line in response.aiter_lines():
            chunks += line.startswith("data: ")
            if request.drop_after_chunks is not None and chunks >= request.drop_after_chunks:
                tally.disconnected += 1
                return 0.0  # leaving the block closes the connection mid-stream
            if line.startswith("data: ") and '"error"' in line:
                tally.errors.append(f"error event: {line[:300]}")
                return 0.0
        tally.completed += 1
        return 0.0


async def _one(client: httpx.AsyncClient, request: Plan, tally: Tally, deadline: float) -> float:
    started = time.monotonic()
    sent = _Sent()
    try:
        if request.drop_after_s is not None:
            try:
                return await asyncio.wait_for(_send(client, request, tally, sent), request.drop_after_s)
            except TimeoutError:
                if sent.written:
                    tally.disconnected += 1
                else:
                    tally.unsent += 1
                return 0.0
        return await asyncio.wait_for(_send(client, request, tally, sent), deadline)
    except TimeoutError:
        tally.hung += 1
        return 0.0
    except httpx.HTTPError as exc:
        tally.errors.append(f"{type(exc).__name__}: {exc}")
        return 0.0
    finally:
        tally.sent += sent.written
        tally.slowest_s = max(tally.slowest_s, time.monotonic() - started)


async def _client(
    url: str, rng: random.Random, until: float, tally: Tally, deadline: float, drop_rate: float
) -> None:
    async with httpx.AsyncClient(base_url=url, timeout=httpx.Timeout(deadline + 30)) as client:
        while time.monotonic() < until:
            wait = await _one(client, plan(rng, drop_rate), tally, deadline)
            await asyncio.sleep(wait or rng.uniform(0, 0.5))


async def _drained(url: str) -> bool:
    """True once the server has no generation pending (running or queued)."""
    async with httpx.AsyncClient(base_url=url, timeout=30) as client:
        stop = time.monotonic() + DRAIN_SECONDS
        while time.monotonic() < stop:
            pool = (await client.get("/v1/admin/pool")).json()
            if pool["pending_requests"] == 0 and all(m["active_requests"] == 0 for m in pool["models"]):
                return True
            await asyncio.sleep(0.1)
    return False


def _run_rows(url: str, params: dict[str, Any]) -> list[dict[str, Any]]:
    """Every audit row matching `params`, page by page."""
    rows: list[dict[str, Any]] = []
    while True:
        page = httpx.get(f"{url}/v1/admin/audit", params={**params, "offset": len(rows)}, timeout=30)
        data = page.json()["data"]
        rows += data
        if len(data) < params["limit"]:
            return rows


def _audit(url: str, since: datetime, tally: Tally) -> None:
    """The audit rows of the run, polled until each request's row is written and ended (rows
    are written as requests arrive and completed when they end, in batches)."""
    params: dict[str, Any] = {"endpoint": ENDPOINT, "since": since.isoformat(), "limit": 500}
    stop = time.monotonic() + 30
    while True:
        rows = _run_rows(url, params)
        still_open = sum(row["state"] == "in_flight" for row in rows)
        if (len(rows) >= tally.sent and not still_open) or time.monotonic() > stop:
            break
        time.sleep(0.2)
    tally.audit_rows, tally.audit_open = len(rows), still_open
    tally.audit_missing = len(tally.request_ids - {row["request_id"] for row in rows})


def stress(
    url: str, *, clients: int, seconds: float, seed: int, deadline: float, drop_rate: float = 0.25
) -> Tally:
    """Run `clients` clients for `seconds` against the server at `url` (its model loaded); each
    request is dropped by its client with probability `drop_rate`."""
    tally = Tally()
    since = datetime.now(UTC)

    async def run() -> None:
        until = time.monotonic() + seconds
        rngs = [random.Random(f"{seed}-{i}") for i in range(clients)]
        await asyncio.gather(*(_client(url, rng, until, tally, deadline, drop_rate) for rng in rngs))
        tally.drained = await _drained(url)

    asyncio.run(run())
    _audit(url, since, tally)
    return tally


def report(tally: Tally, clients: int, seconds: int, max_pending: int, deadline: int) -> str:
    verdict = "hold" if tally.holds else "do NOT hold"
    rows = [
        ("requests sent", tally.sent),
        ("completed", tally.completed),
        ("refused: 503 with Retry-After", tally.refused),
        ("dropped by the client mid-request", tally.disconnected),
        ("dropped by the client before the request went out (not sent)", tally.unsent),
        (f"hung (no answer within {deadline} s)", tally.hung),
        ("other errors", len(tally.errors)),
        ("audit rows for the run", tally.audit_rows),
        ("responses without an audit row", tally.audit_missing),
        ("audit rows still in flight after the drain", tally.audit_open),
    ]
    lines = [
        run_line(),
        f"Model {DEFAULT_MODEL_ID}, {clients} clients for {seconds} s, MLX_SERVER_MAX_PENDING_REQUESTS "
        f"{max_pending}; random prompts (3-60 words), max_tokens 1-40, 70 % streamed, ~25 % dropped by "
        "the client (a stream after 1-6 chunks, a plain request after 0.2-4 s).",
        "",
        "| outcome | requests |",
        "|---|---|",
        *(f"| {name} | {count} |" for name, count in rows),
        "",
        f"Slowest request {tally.slowest_s:.1f} s; the server drained: {'yes' if tally.drained else 'NO'}. "
        f"The invariants (none hung, no other error, one audit row per request sent, each "
        f"completed) **{verdict}**.",
    ]
    lines += [f"- error: {error}" for error in tally.errors[:10]]
    return "\n".join(lines)


def main() -> None:
    args = bench_arguments(
        __doc__,
        "update this markdown file's stress section",
        clients=50,
        seconds=120,
        seed=1,
        max_pending=16,
        deadline=300,
    )
    settings = {"MLX_SERVER_MAX_PENDING_REQUESTS": str(args.max_pending), "MLX_SERVER_IDLE_TTL_SECONDS": "0"}
    with tempfile.TemporaryDirectory(prefix="mlx-bench-") as tmp, running_server(Path(tmp), settings) as url:
        httpx.post(f"{url}/v1/admin/models/{DEFAULT_MODEL_ID}/load", timeout=600).raise_for_status()
        tally = stress(
            url, clients=args.clients, seconds=args.seconds, seed=args.seed, deadline=args.deadline
        )
    section = report(tally, args.clients, args.seconds, args.max_pending, args.deadline)
    publish(
        section, args.write, "Stress: many clients, random prompts and disconnects", MARKER_START, MARKER_END
    )
    if not tally.holds:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
