"""Server time of every dashboard page with 10 000 audit rows (target: < 100 ms each).

Builds a fresh home with 10 000 audit rows spread over 30 days (5 models, 4 endpoints, a mix
of statuses, errors and parameters), then times each page through FastAPI's TestClient, in
process, so the figures are the app's own time (no network): the audit pages with each filter,
"load more", the detail, the exports and the live tail (to the first byte), and every other
GET page the manager registers (found from its routes, so new pages are timed too).

    python -m mlx_manager.benchmark.dashboard_pages [--rows 10000] [--runs 20] [--write docs/benchmarks.md]

It lives with the manager: it times the manager app, in process.
"""

from __future__ import annotations

import os
import platform
import random
import statistics
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from mlx_server.facade import bench_arguments, publish

START, END = "<!-- dashboard-pages-benchmark:start -->", "<!-- dashboard-pages-benchmark:end -->"
TARGET_MS = 100.0
MODELS = ("SmolLM2-135M-Instruct", "qwen3-8b", "llama-3.2-3b", "gemma-3-4b", "mistral-7b")
ENDPOINTS = ("POST /v1/chat/completions", "POST /v1/messages", "POST /v1/completions", "GET /v1/models")
# Not timed: an endless stream (its first byte is not a page) and a page whose time is the hub's.
SKIPPED = {"/downloads/events": "an endless event stream", "/hub/search": "waits on the Hugging Face hub"}


def _rows(count: int) -> list[Any]:
    from mlx_server.facade import AuditLog

    rng = random.Random(7)
    start = datetime.now(UTC) - timedelta(days=30)
    step = timedelta(days=30) / count
    rows = []
    for i in range(count):
        endpoint = rng.choices(ENDPOINTS, weights=(70, 15, 5, 10))[0]
        status = rng.choices((200, 400, 404, 429, 499, 500, 503), weights=(90, 3, 2, 1, 2, 1, 1))[0]
        generating = endpoint != "GET /v1/models"
        rows.append(
            AuditLog(
                request_id=f"{i:032x}",
                created_at=start + step * i,
                endpoint=endpoint,
                model=rng.choice(MODELS) if generating else None,
                status=status,
                latency_ms=rng.uniform(5, 20_000) if generating else rng.uniform(1, 5),
                ttft_ms=rng.uniform(50, 3000) if generating and status == 200 else None,
                protocol=("anthropic" if "messages" in endpoint else "openai") if generating else None,
                stream=rng.random() < 0.6 if generating else None,
                prompt_tokens=rng.randint(10, 8000) if generating else None,
                completion_tokens=rng.randint(1, 1024) if generating and status == 200 else None,
                error=None if status < 400 else f"Request failed with {status}: see the server log.",
                parameters={"temperature": 0.7, "max_tokens": 512} if generating else None,
            )
        )
    return rows


def _time(call: Callable[[], float | None], runs: int) -> list[float]:
    """Milliseconds per run; `call` returns its own figure (first byte) or None to time itself."""
    call()  # warm-up: templates compiled, caches filled
    times = []
    for _ in range(runs):
        began = time.perf_counter()
        own = call()
        times.append(own if own is not None else (time.perf_counter() - began) * 1000)
    return times


def _measure(rows: int, runs: int) -> list[tuple[str, int, list[float]]]:
    from fastapi.testclient import TestClient
    from sqlmodel import col, select

    from mlx_manager.main import create_app
    from mlx_server.facade import AuditLog, background_session

    results: list[tuple[str, int, list[float]]] = []
    with TestClient(create_app()) as client:
        with background_session() as session:
            session.add_all(_rows(rows))
            session.commit()
            ids = list(session.exec(select(AuditLog.id).order_by(col(AuditLog.id))).all())

        def page(label: str, url: str, headers: dict[str, str] | None = None) -> None:
            def call() -> None:
                client.get(url, headers=headers)

            results.append((label, client.get(url, headers=headers).status_code, _time(call, runs)))

        def first_byte(label: str, url: str) -> None:
            def call() -> float:
                began = time.perf_counter()
                with client.stream("GET", url) as response:
                    next(response.iter_raw())
                    return (time.perf_counter() - began) * 1000

            with client.stream("GET", url) as response:
                status = response.status_code
            results.append((label, status, _time(call, runs)))

        _audit_pages(page, first_byte, ids, rows)
        timed_with_ids = _pages_with_ids(page)

        # Every other GET route of the app, as its OpenAPI schema lists them.
        timed = {"/audit", "/audit/{audit_id}", "/audit/export.csv", "/audit/export.jsonl", "/audit/events"}
        for path, operations in client.get("/openapi.json").json()["paths"].items():
            if "get" not in operations or path in timed or path in timed_with_ids:
                continue
            if "{" in path or path in SKIPPED:
                results.append((f"{path} (not timed: {SKIPPED.get(path, 'needs an id')})", 0, []))
            else:
                page(path, path)
    return results


Page = Callable[..., None]


def _audit_pages(page: Page, first_byte: Page, ids: list[int | None], rows: int) -> None:
    """The audit log with each filter, "load more", the detail, the exports and the live tail."""
    middle, oldest = ids[len(ids) // 2], ids[60]
    week_ago = (datetime.now(UTC) - timedelta(days=7)).strftime("%Y-%m-%dT%H:%M")
    fragment = {"HX-Request": "true"}
    page("/audit", "/audit")
    page("/audit?model= (htmx filter)", f"/audit?model={MODELS[1]}", fragment)
    page("/audit?endpoint= (htmx filter)", "/audit?endpoint=POST%20/v1/messages", fragment)
    page("/audit?status=404 (htmx filter)", "/audit?status=404", fragment)
    page("/audit?status=5xx (htmx filter)", "/audit?status=5xx", fragment)
    page("/audit?status=error (htmx filter)", "/audit?status=error", fragment)
    page("/audit?since= (last 7 days)", f"/audit?since={week_ago}", fragment)
    page("/audit, all filters", f"/audit?model={MODELS[0]}&status=2xx&since={week_ago}", fragment)
    page("/audit?before_id= (load more, middle)", f"/audit?before_id={middle}", fragment)
    page("/audit?before_id= (load more, last page)", f"/audit?before_id={oldest}", fragment)
    page("/audit/{id}", f"/audit/{middle}")
    page("/audit/{id} (htmx inline)", f"/audit/{middle}", fragment)
    page("/audit/{id} unknown (404)", "/audit/99999999")
    first_byte("/audit/export.csv, first byte", "/audit/export.csv")
    page(f"/audit/export.csv, all {rows} rows (whole download)", "/audit/export.csv")
    first_byte("/audit/export.jsonl, first byte", "/audit/export.jsonl")
    first_byte("/audit/events, first byte", "/audit/events")


def _pages_with_ids(page: Callable[[str, str], None]) -> set[str]:
    """The model detail page and a 40-message conversation (with reasoning, a tool call and code
    to highlight), on records made for the run; returns the routes timed."""

    from mlx_manager.services.conversations import add_message, create_conversation
    from mlx_server.facade import ModelRecord, ModelSource, background_session

    with background_session(expire_on_commit=False) as session:
        session.add(
            ModelRecord(id="bench-model", source=ModelSource.LOCAL, path="/nonexistent", size_bytes=1)
        )
        conversation = create_conversation(session, model_id="bench-model")
        call = {
            "id": "call_1",
            "type": "function",
            "function": {"name": "calculator", "arguments": '{"a": 1}'},
        }
        for turn in range(20):
            add_message(session, conversation, "user", f"Question {turn}: explain this code.")
            code = f"```python\ndef f(x):\n    return x * {turn}\n```"
            reply = f"Here is **turn {turn}**:\n\n{code}\n\n- one\n- two"
            add_message(
                session,
                conversation,
                "assistant",
                reply,
                reasoning="Thinking it over.",
                tool_calls=[call] if turn % 5 == 0 else None,
                stats={"ttft_s": 0.4, "tokens_per_s": 10.0, "prompt_tokens": 90, "completion_tokens": 40},
            )
    page("/models/{model_id}", "/models/bench-model")
    page("/chat/{conversation_id} (40 messages)", f"/chat/{conversation.id}")
    page("/chat/{conversation_id}/export.{kind} (md)", f"/chat/{conversation.id}/export.md")
    return {"/models/{model_id}", "/chat/{conversation_id}", "/chat/{conversation_id}/export.{kind}"}


def _table(results: list[tuple[str, int, list[float]]], rows: int, runs: int) -> str:
    stamp = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        f"Run {stamp} on {platform.system()} {platform.machine()}, {os.cpu_count()} cores, "
        f"Python {platform.python_version()}; {rows} audit rows, {runs} runs per page after a warm-up.",
        "",
        "| page | status | median ms | p95 ms | max ms |",
        "|---|---|---|---|---|",
    ]
    worst = 0.0
    for label, status, times in results:
        if not times:
            lines.append(f"| `{label}` | | | | |")
            continue
        p95 = statistics.quantiles(times, n=20)[-1] if len(times) > 1 else times[0]
        median, slowest = statistics.median(times), max(times)
        lines.append(f"| `{label}` | {status} | {median:.1f} | {p95:.1f} | {slowest:.1f} |")
        if "whole download" not in label:
            worst = max(worst, p95)
    verdict = "meets" if worst < TARGET_MS else "misses"
    lines += ["", f"Slowest page at p95: **{worst:.1f} ms** ({verdict} the {TARGET_MS:.0f} ms target)."]
    return "\n".join(lines)


def main() -> None:
    args = bench_arguments(
        __doc__, "replace the dashboard section of this markdown file", rows=10_000, runs=20
    )
    with tempfile.TemporaryDirectory(prefix="mlx-dashboard-bench-") as home:
        # A fresh home, no default model import, and no way to reach the hub.
        os.environ.update(
            MLX_MANAGER_HOME=home,
            MLX_MANAGER_IMPORT_DEFAULT_MODEL="0",
            HF_HUB_OFFLINE="1",
            HF_ENDPOINT="http://127.0.0.1:9",
        )
        os.environ.pop("MLX_SERVER_HOME", None)
        section = _table(_measure(args.rows, args.runs), args.rows, args.runs)
    publish(section, args.write, "Dashboard pages", START, END)


if __name__ == "__main__":
    main()
