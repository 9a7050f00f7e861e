"""Serving many clients at once (#14, #33): our server against mlx-lm's `mlx_lm.server`, both as
users start it and on the same footing.

Three servers from this venv run side by side on the same SmolLM2 (GGUF Q4_1 imported):
- ours, `mlx-manager serve`: OpenBLAS loaded in-process (utils/cpu_blas.py), the Q4 weights
  dequantized to float32 at load (models/cpu_weights.py);
- mlx_lm.server as shipped: `mlx_lm.server --model <the Q4 dir>`, with the reference BLAS that
  MLX's Linux wheel bundles;
- mlx_lm.server on the same footing: `LD_PRELOAD=libopenblas.so.0 mlx_lm.server --model <a
  float32 copy made by mlx_lm.convert -d --dtype float32>`. The preload is checked in its
  process's memory map, and the three servers' prefill speeds are printed and reported.

All driven over HTTP only (greedy, streamed, timed on the client) in `--rounds` alternating
rounds: in each round every figure is taken on every server in turn before the next figure
(the order rotating and reversing from one figure to the next), so the host's drift hits the
servers compared alike. Figures: single-stream decode tok/s (median of `--runs`); 1, 4
and 8 simultaneous streams (distinct prompts, `--tokens` each): aggregate tok/s (all completion
tokens over the wall time from the first request to the last token) and the slowest time to
first token; the TTFT of rounds 2+ of two alternating conversations with different system
prompts, and of turns 2+ of one conversation with a long system prompt (prefix_cache.py's
scenarios, 3 turns). Reported: each figure's median over the rounds with its quartiles, and ours
relative to each mlx_lm.server per round (median and quartiles). Then, while our server still
runs, its single-stream decode against raw `mlx_lm.stream_generate` in this process on the
weights it runs, in paired rounds (decode.py's method).

    python -m mlx_server.benchmark.concurrency [--tokens 64] [--runs 3] [--rounds 5]
        [--write docs/benchmarks.md]
"""

from __future__ import annotations

import ctypes.util
import functools
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

import httpx

from mlx_server.benchmark import concurrency_report, decode, prefix_cache
from mlx_server.benchmark._server import alternate, running_mlx_lm_server, running_server, stream_chat
from mlx_server.benchmark.concurrency_report import AgainstRaw, Server
from mlx_server.benchmark.report import bench_arguments, publish
from mlx_server.models.store import DEFAULT_MODEL_ID

MARKER_START = "<!-- concurrency-benchmark:start -->"
MARKER_END = "<!-- concurrency-benchmark:end -->"
STREAMS = (1, 4, 8)
TOPICS = ["a lighthouse", "a desert train", "a chess club", "a lost kite", "a night market", "a glacier"]
TOPICS += ["an old violin", "a rooftop garden"]
CONVERSATION_TURNS = 3
# Rounds of raw mlx-lm and our single stream side by side, as decode.py's default.
PAIRED_ROUNDS = 9


@dataclass(frozen=True)
class Burst:
    """`streams` simultaneous streams: aggregate tokens/s and the slowest time to first token."""

    streams: int
    aggregate_tps: float
    slowest_ttft_s: float


def burst(url: str, model: str, streams: int, tokens: int) -> Burst:
    started = time.perf_counter()

    def one(i: int) -> tuple[int, float, float]:
        messages = [{"role": "user", "content": f"Write a long story about {TOPICS[i % len(TOPICS)]}."}]
        run = stream_chat(url, messages, tokens, model)
        return run.tokens, run.ttft_s, time.perf_counter()

    with ThreadPoolExecutor(streams) as pool:
        results = list(pool.map(one, range(streams)))
    wall = max(end for _, _, end in results) - started
    return Burst(streams, sum(n for n, _, _ in results) / wall, max(ttft for _, ttft, _ in results))


Figures = dict[str, float]
Step = Callable[[Server], Figures]


def steps(tokens: int, runs: int) -> list[Step]:
    """Each figure's measurement of one server, by the keys of concurrency_report.FIGURES: the
    single stream (median of `runs`), each burst, the conversations."""

    def single(server: Server) -> Figures:
        done = [stream_chat(server.url, decode.MESSAGES, tokens, server.model) for _ in range(runs)]
        return {"decode": statistics.median(run.decode_tps for run in done)}

    def bursting(streams: int) -> Step:
        def measure(server: Server) -> Figures:
            done = burst(server.url, server.model, streams, tokens)
            return {f"aggregate_{streams}": done.aggregate_tps, f"ttft_{streams}": done.slowest_ttft_s}

        return measure

    def talking(server: Server) -> Figures:
        talks = prefix_cache.measure(server.url, server.model, CONVERSATION_TURNS, 8)
        return {"alternating": statistics.median(talks.alternating), "warm": statistics.median(talks.warm)}

    return [single, *(bursting(streams) for streams in STREAMS), talking]


Results = dict[str, list[Figures]]  # per server: each round's figures


def turns(servers: list[Server], index: int) -> list[Server]:
    """The servers in the order of the `index`-th measurement: rotated, and reversed every other
    time, so each server follows each other one (a rotation alone keeps the cycle: the same
    server would always go right after the same other one)."""
    shift = index % len(servers)
    order = servers[shift:] + servers[:shift]
    return order[::-1] if index % 2 else order


def alternating_rounds(servers: list[Server], tokens: int, runs: int, rounds: int) -> Results:
    """`rounds` rounds; in each, every figure is taken on every server in turn before the next
    figure, so the host's drift within a round (minutes) hits the servers compared alike."""
    results: Results = {server.name: [] for server in servers}
    measured = steps(tokens, runs)
    for i in range(rounds):
        figures: dict[str, Figures] = {server.name: {} for server in servers}
        for j, step in enumerate(measured):
            for server in turns(servers, i * len(measured) + j):
                figures[server.name].update(step(server))
        for server in servers:
            print(
                f"round {i + 1}, {server.name}: "
                + ", ".join(f"{k} {v:.2f}" for k, v in figures[server.name].items())
            )
            results[server.name].append(figures[server.name])
    return results


def prefill_tps(server: Server, ours: Server, salt: str) -> float:
    """Prompt tokens/s of a fresh ~440-token prompt (nothing cached, one token asked): its TTFT
    is its prefill. Counted by our /v1/tokenize (the same tokenizer and chat template)."""
    system = f"{salt} {prefix_cache.LONG_SYSTEM}"
    messages = [{"role": "system", "content": system}, {"role": "user", "content": "Hello"}]
    body = {"model": ours.model, "messages": messages}
    count = httpx.post(f"{ours.url}/v1/tokenize", json=body, timeout=60).raise_for_status().json()["count"]
    return int(count) / stream_chat(server.url, messages, 1, server.model).ttft_s


def against_raw(url: str, model_dir: Path, tokens: int) -> AgainstRaw:
    decode.raw_run(model_dir, 4, as_served=True)  # loads it here
    runs = alternate(
        PAIRED_ROUNDS,
        raw=functools.partial(decode.raw_run, model_dir, tokens, True),
        server=functools.partial(stream_chat, url, decode.MESSAGES, tokens),
    )
    median, low, high = decode.paired(runs["server"], runs["raw"])
    raw_tps = statistics.median(r.decode_tps for r in runs["raw"])
    return AgainstRaw(raw_tps, median, low, high, PAIRED_ROUNDS)


def float32_copy(model_dir: Path, out: Path) -> Path:
    """The Q4 model dequantized to float32 by mlx-lm's own converter (the same footing as ours)."""
    command = [sys.executable, "-m", "mlx_lm", "convert", "--hf-path", str(model_dir), "--mlx-path", str(out)]
    subprocess.run([*command, "-d", "--dtype", "float32"], check=True, capture_output=True)
    return out


def _servers(stack: ExitStack, home: Path) -> Iterator[Server]:
    """Ours, then mlx_lm.server on the same footing, then as shipped, each running until `stack` closes."""
    url = stack.enter_context(running_server(home))
    stream_chat(url, decode.MESSAGES, 4)  # imports and loads the model
    yield Server("ours", "MLX Manager", url, DEFAULT_MODEL_ID, "`mlx-manager serve`")
    q4_dir = home / "models" / DEFAULT_MODEL_ID
    openblas = ctypes.util.find_library("openblas") or "libopenblas.so.0"
    f32_dir = float32_copy(q4_dir, home / "f32")
    started = running_mlx_lm_server(f32_dir, home / "mlx_lm_f32.log", preload=openblas)
    how = f"`LD_PRELOAD={openblas} mlx_lm.server --model <float32 copy: mlx_lm.convert -d --dtype float32>`"
    yield Server("same", "mlx_lm.server, same footing", stack.enter_context(started), "default_model", how)
    started = running_mlx_lm_server(q4_dir, home / "mlx_lm.log")
    how = "`mlx_lm.server --model <the Q4 dir>` (MLX's bundled BLAS)"
    yield Server("shipped", "mlx_lm.server as shipped", stack.enter_context(started), "default_model", how)


def main() -> None:
    args = bench_arguments(
        __doc__, "update this markdown file's concurrency section", tokens=64, runs=3, rounds=5
    )
    with tempfile.TemporaryDirectory(prefix="mlx-bench-") as tmp, ExitStack() as stack:
        home = Path(tmp)
        servers = list(_servers(stack, home))
        for server in servers[1:]:
            stream_chat(server.url, decode.MESSAGES, 4, server.model)  # loads the model
        prefill = {s.name: prefill_tps(s, servers[0], f"Prefill check of {s.name}.") for s in servers}
        print("prefill tok/s: " + ", ".join(f"{name} {tps:.0f}" for name, tps in prefill.items()))
        results = alternating_rounds(servers, args.tokens, args.runs, args.rounds)
        raw = against_raw(servers[0].url, home / "models" / DEFAULT_MODEL_ID, args.tokens)
    section = concurrency_report.report(servers, results, prefill, raw, args.tokens, args.runs, args.rounds)
    publish(section, args.write, "Serving many clients: ours vs mlx_lm.server", MARKER_START, MARKER_END)


if __name__ == "__main__":
    main()
