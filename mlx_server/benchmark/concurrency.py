"""Serving many clients at once (#14): our server and mlx-lm's `mlx_lm.server` side by side.

Both from this venv, on the same SmolLM2 files, one after the other in one run, driven over HTTP
only (greedy, streamed, timed on the client), so nothing here depends on how either schedules
its work. For each server:
- single-stream decode tok/s (median of `--runs`);
- 1, 4 and 8 simultaneous streams (distinct prompts, `--tokens` each): aggregate tok/s (all
  completion tokens over the wall time from the first request to the last token) and the
  slowest time to first token;
- two alternating conversations with different system prompts: TTFT of rounds 2+; one
  conversation with a long system prompt: TTFT of turns 2+ (prefix_cache.py's scenarios);
and, while our server still runs, single-stream decode against raw `mlx_lm.stream_generate` in
this process on the weights our server runs, in paired rounds (decode.py's method: the host's
load drifts over seconds, so each of ours is compared with the raw run next to it).

The ratios are printed against the issue's targets: ours >= mlx_lm.server on every figure,
alternating rounds 2+ within 1.5x of the single warm conversation, single-stream decode >= 95 %
of raw mlx-lm.

    python -m mlx_server.benchmark.concurrency [--tokens 64] [--runs 3] [--rounds 3]
        [--write docs/benchmarks.md]
"""

from __future__ import annotations

import functools
import statistics
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from mlx_server.benchmark import decode, prefix_cache
from mlx_server.benchmark._server import alternate, running_mlx_lm_server, running_server, stream_chat
from mlx_server.benchmark.report import bench_arguments, publish, run_line
from mlx_server.models.store import DEFAULT_MODEL_ID

MARKER_START = "<!-- concurrency-benchmark:start -->"
MARKER_END = "<!-- concurrency-benchmark:end -->"
STREAMS = (1, 4, 8)
TOPICS = ["a lighthouse", "a desert train", "a chess club", "a lost kite", "a night market", "a glacier"]
TOPICS += ["an old violin", "a rooftop garden"]
# Rounds of raw mlx-lm and our single stream side by side, as decode.py's default.
PAIRED_ROUNDS = 9


@dataclass(frozen=True)
class Burst:
    """`streams` simultaneous streams: aggregate tokens/s and the slowest time to first token."""

    streams: int
    aggregate_tps: float
    slowest_ttft_s: float


@dataclass(frozen=True)
class Figures:
    decode_tps: float
    bursts: dict[int, Burst]
    conversations: prefix_cache.Figures


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


def measure(url: str, model: str, tokens: int, runs: int, rounds: int) -> Figures:
    """Every figure of one server (its model loaded by the first request)."""
    single = [stream_chat(url, decode.MESSAGES, tokens, model).decode_tps for _ in range(runs)]
    print(f"  single stream: {statistics.median(single):.2f} tok/s")
    bursts = {}
    for streams in STREAMS:
        bursts[streams] = burst(url, model, streams, tokens)
        print(
            f"  {streams} streams: {bursts[streams].aggregate_tps:.2f} tok/s, slowest TTFT "
            f"{bursts[streams].slowest_ttft_s:.2f} s"
        )
    return Figures(statistics.median(single), bursts, prefix_cache.measure(url, model, rounds, 8))


def _row(name: str, ours: float, theirs: float, unit: str, higher_is_better: bool) -> str:
    """A table row: both figures, ours relative to mlx_lm.server, and whether ours is at least as good."""
    ratio = ours / theirs if higher_is_better else theirs / ours
    verdict = "meets" if ratio >= 1 else "misses"
    return f"| {name} | {theirs:.2f} {unit} | {ours:.2f} {unit} | {ratio:.2f}x ({verdict}) |"


def _median(pick: Callable[[prefix_cache.Figures], list[float]], figures: Figures) -> float:
    return statistics.median(pick(figures.conversations))


@dataclass(frozen=True)
class AgainstRaw:
    """Our single-stream decode over raw mlx-lm's, per paired round: median and quartiles."""

    raw_tps: float
    median: float
    low: float
    high: float
    rounds: int


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


def report(ours: Figures, reference: Figures, raw: AgainstRaw, tokens: int, runs: int, rounds: int) -> str:
    rows = [_row("one stream, decode", ours.decode_tps, reference.decode_tps, "tok/s", True)]
    for n in STREAMS:
        mine, theirs = ours.bursts[n], reference.bursts[n]
        rows.append(
            _row(
                f"{n} simultaneous streams, aggregate",
                mine.aggregate_tps,
                theirs.aggregate_tps,
                "tok/s",
                True,
            )
        )
        rows.append(
            _row(
                f"{n} simultaneous streams, slowest TTFT",
                mine.slowest_ttft_s,
                theirs.slowest_ttft_s,
                "s",
                False,
            )
        )
    for label, pick in (
        ("two alternating conversations, TTFT of rounds 2+ (median)", lambda f: f.alternating),
        ("one conversation, long system prompt, TTFT of turns 2+ (median)", lambda f: f.warm),
    ):
        rows.append(_row(label, _median(pick, ours), _median(pick, reference), "s", False))
    warm_ratio = _median(lambda f: f.alternating, ours) / _median(lambda f: f.warm, ours)
    return "\n".join(
        [
            run_line(),
            f"Model {DEFAULT_MODEL_ID} (GGUF Q4_1 imported; mlx_lm.server loads the same directory), greedy, "
            f"streamed, max_tokens {tokens} per stream ({runs} single-stream runs, medians; the "
            f"conversations {rounds} rounds of 8 tokens); timed on the client.",
            "",
            "| figure | mlx_lm.server | MLX Manager | ours vs mlx_lm.server (>= 1 is as good or better) |",
            "|---|---|---|---|",
            *rows,
            "",
            f"Ours, alternating conversations against a single warm one: **{warm_ratio:.2f}x** "
            f"({'meets' if warm_ratio <= 1.5 else 'misses'} the 1.5x target). Ours, single-stream decode "
            f"against raw `mlx_lm.stream_generate` on the same weights ({raw.raw_tps:.2f} tok/s), "
            f"{raw.rounds} paired rounds: median **{raw.median:.1%}** "
            f"(quartiles {raw.low:.1%}-{raw.high:.1%}; "
            f"{'meets' if raw.median >= 0.95 else 'misses'} the 95 % target).",
        ]
    )


def main() -> None:
    args = bench_arguments(
        __doc__, "update this markdown file's concurrency section", tokens=64, runs=3, rounds=3
    )
    with tempfile.TemporaryDirectory(prefix="mlx-bench-") as tmp:
        home = Path(tmp)
        with running_server(home) as url:
            print("MLX Manager:")
            stream_chat(url, decode.MESSAGES, 4)  # loads the model
            ours = measure(url, DEFAULT_MODEL_ID, args.tokens, args.runs, args.rounds)
            model_dir = home / "models" / DEFAULT_MODEL_ID
            raw = against_raw(url, model_dir, args.tokens)
        with running_mlx_lm_server(model_dir, home / "mlx_lm.log") as url:
            print("mlx_lm.server:")
            stream_chat(url, decode.MESSAGES, 4, "default_model")
            reference = measure(url, "default_model", args.tokens, args.runs, args.rounds)
    section = report(ours, reference, raw, args.tokens, args.runs, args.rounds)
    publish(section, args.write, "Serving many clients: ours vs mlx_lm.server", MARKER_START, MARKER_END)


if __name__ == "__main__":
    main()
