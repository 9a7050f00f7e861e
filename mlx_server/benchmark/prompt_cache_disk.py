"""Time to first token of a ~2 000-token prefix: computed cold, read back from the prompt cache's
disk tier, and taken from memory (#33, models/prompt_cache_store.py).

Our server only (mlx_lm.server keeps no prompt cache on disk), with a memory bound that holds
one such entry (MLX_SERVER_PROMPT_CACHE_MB=100; one takes ~90 MiB as float32 on this CPU). Each
round uses two fresh system prompts A and B of the same length:
- A + question 1: cold (nothing shares more than the chat template's first tokens);
- A + question 2: from memory (the entry of the first request);
- B + question 1: cold again, and it evicts A's entries to disk;
- A + question 3, once the writes are done: from disk (the pool's `disk_hits` must grow).

    python -m mlx_server.benchmark.prompt_cache_disk [--rounds 3] [--tokens 4] [--write docs/benchmarks.md]
"""

from __future__ import annotations

import statistics
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from mlx_server.benchmark._server import running_server, stream_chat
from mlx_server.benchmark.prefix_cache import LONG_SYSTEM, TITLE_WRITER
from mlx_server.benchmark.report import bench_arguments, publish, run_line
from mlx_server.models.store import DEFAULT_MODEL_ID

MARKER_START = "<!-- prompt-cache-disk-benchmark:start -->"
MARKER_END = "<!-- prompt-cache-disk-benchmark:end -->"
SETTINGS = {"MLX_SERVER_PROMPT_CACHE_MB": "100"}
QUESTIONS = ["Hello, are you ready?", "What do you do first?", "And after that?"]
# LONG_SYSTEM is ~440 tokens: four of it, TITLE_WRITER and the chat template make ~1 950.
PREFIX = " ".join([LONG_SYSTEM] * 4 + [TITLE_WRITER])


@dataclass
class Figures:
    prefix_tokens: int = 0
    cold: list[float] = field(default_factory=list)
    disk: list[float] = field(default_factory=list)
    memory: list[float] = field(default_factory=list)


def _system(round_no: int, name: str) -> str:
    # A distinct first sentence: no two prompts share more than the template's first tokens.
    return f"Session {round_no} of agent {name}. {PREFIX}"


def _messages(system: str, question: str) -> list[dict[str, str]]:
    return [{"role": "system", "content": system}, {"role": "user", "content": question}]


def _pool(url: str) -> dict[str, int]:
    """The default model's disk hits and the bytes still waiting to be written."""
    pool = httpx.get(f"{url}/v1/admin/pool", timeout=30).json()
    model = next(m for m in pool["models"] if m["id"] == DEFAULT_MODEL_ID)
    pending = pool["prompt_cache_disk"]["pending_bytes"]
    return {"disk_hits": model["prompt_cache"]["disk_hits"], "pending": pending}


def _writes_done(url: str) -> None:
    deadline = time.monotonic() + 120
    while _pool(url)["pending"] and time.monotonic() < deadline:
        time.sleep(0.1)


def measure(url: str, rounds: int, tokens: int) -> Figures:
    figures = Figures()
    stream_chat(url, [{"role": "user", "content": "Hi"}], tokens)  # loads the model
    counted = httpx.post(
        f"{url}/v1/tokenize",
        json={"model": DEFAULT_MODEL_ID, "messages": [{"role": "system", "content": _system(0, "A")}]},
        timeout=60,
    )
    figures.prefix_tokens = counted.raise_for_status().json()["count"]
    for i in range(rounds):
        a, b = _system(i, "A"), _system(i, "B")
        cold = stream_chat(url, _messages(a, QUESTIONS[0]), tokens).ttft_s
        memory = stream_chat(url, _messages(a, QUESTIONS[1]), tokens).ttft_s
        cold_b = stream_chat(url, _messages(b, QUESTIONS[0]), tokens).ttft_s
        _writes_done(url)
        hits = _pool(url)["disk_hits"]
        disk = stream_chat(url, _messages(a, QUESTIONS[2]), tokens).ttft_s
        if _pool(url)["disk_hits"] != hits + 1:
            raise SystemExit(f"round {i + 1}: the last request did not read its prefix from disk")
        figures.cold += [cold, cold_b]
        figures.memory.append(memory)
        figures.disk.append(disk)
        print(f"round {i + 1}: cold {cold:.2f} / {cold_b:.2f} s, disk {disk:.2f} s, memory {memory:.2f} s")
    return figures


def report(figures: Figures, rounds: int, tokens: int) -> str:
    def cell(times: list[float]) -> str:
        low, high = min(times), max(times)
        return f"{statistics.median(times):.2f} s ({low:.2f}–{high:.2f})"

    cold = statistics.median(figures.cold)
    rows = [
        "| ~2 000-token prefix | TTFT, median (min–max) | cold / this |",
        "|---|---|---|",
        f"| cold (computed) | {cell(figures.cold)} | 1.0x |",
        f"| from disk | {cell(figures.disk)} | {cold / statistics.median(figures.disk):.1f}x |",
        f"| from memory | {cell(figures.memory)} | {cold / statistics.median(figures.memory):.1f}x |",
    ]
    setup = (
        f"Model {DEFAULT_MODEL_ID} (float32 on this CPU), a {figures.prefix_tokens}-token system "
        f"prompt and a short question, greedy, streamed, max_tokens {tokens}, {rounds} rounds; "
        "MLX_SERVER_PROMPT_CACHE_MB=100 (one such entry in memory); TTFT on the client."
    )
    return "\n".join([run_line(), setup, "", *rows])


def main() -> None:
    args = bench_arguments(__doc__, "update this markdown file's section", rounds=3, tokens=4)
    with tempfile.TemporaryDirectory(prefix="mlx-bench-") as tmp, running_server(Path(tmp), SETTINGS) as url:
        figures = measure(url, args.rounds, args.tokens)
    section = report(figures, args.rounds, args.tokens)
    publish(section, args.write, "Prompt cache on disk: time to first token", MARKER_START, MARKER_END)


if __name__ == "__main__":
    main()
