"""The concurrency benchmark's report (concurrency.py): each figure's median and quartiles over the
alternating rounds for the three servers, and ours relative to each mlx_lm.server per round."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from mlx_server.benchmark.report import run_line
from mlx_server.models.store import DEFAULT_MODEL_ID


@dataclass(frozen=True)
class Server:
    """One server under test: a short name, its column title, URL, model name and how it was started."""

    name: str
    title: str
    url: str
    model: str
    started_as: str


@dataclass(frozen=True)
class Figure:
    key: str
    label: str
    unit: str
    higher_is_better: bool


FIGURES = [Figure("decode", "one stream, decode", "tok/s", True)]
for _n in (1, 4, 8):
    FIGURES += [
        Figure(f"aggregate_{_n}", f"{_n} simultaneous streams, aggregate", "tok/s", True),
        Figure(f"ttft_{_n}", f"{_n} simultaneous streams, slowest TTFT", "s", False),
    ]
FIGURES += [
    Figure("alternating", "two alternating conversations, TTFT of rounds 2+", "s", False),
    Figure("warm", "one conversation, long system prompt, TTFT of turns 2+", "s", False),
]


@dataclass(frozen=True)
class AgainstRaw:
    """Our single-stream decode over raw mlx-lm's, per paired round: median and quartiles."""

    raw_tps: float
    median: float
    low: float
    high: float
    rounds: int


def spread(values: Sequence[float]) -> tuple[float, float, float]:
    """Median, lower and upper quartile (one value: itself three times)."""
    if len(values) < 2:
        return values[0], values[0], values[0]
    low, median, high = statistics.quantiles(values, n=4, method="inclusive")
    return median, low, high


def _cell(values: Sequence[float], unit: str) -> str:
    median, low, high = spread(values)
    return f"{median:.2f} {unit} ({low:.2f}–{high:.2f})"


def _ratio(figure: Figure, ours: Sequence[float], theirs: Sequence[float]) -> str:
    """Ours relative to theirs in each round (>= 1: as good or better), median and quartiles."""
    ratios = [o / t if figure.higher_is_better else t / o for o, t in zip(ours, theirs, strict=True)]
    median, low, high = spread(ratios)
    return f"{median:.2f}x ({low:.2f}–{high:.2f}) {'meets' if median >= 1 else 'misses'}"


def report(
    servers: list[Server],
    results: dict[str, list[dict[str, float]]],
    prefill: dict[str, float],
    raw: AgainstRaw,
    tokens: int,
    runs: int,
    rounds: int,
) -> str:
    ours, same, shipped = servers
    rows = []
    for figure in FIGURES:
        values = {name: [r[figure.key] for r in done] for name, done in results.items()}
        cells = [_cell(values[s.name], figure.unit) for s in (ours, same, shipped)]
        ratios = [_ratio(figure, values[ours.name], values[s.name]) for s in (same, shipped)]
        rows.append(f"| {figure.label} | {' | '.join(cells)} | {' | '.join(ratios)} |")
    warm_ratio = statistics.median(r["alternating"] for r in results[ours.name]) / statistics.median(
        r["warm"] for r in results[ours.name]
    )
    started = "; ".join(f"{s.title}: {s.started_as}, prefill {prefill[s.name]:.0f} tok/s" for s in servers)
    return "\n".join(
        [
            run_line(),
            f"Model {DEFAULT_MODEL_ID} (GGUF Q4_1 imported), greedy, streamed, max_tokens {tokens} per "
            f"stream, {rounds} rounds (each round: {runs} single-stream runs, then each burst, then the "
            "conversations of 8 tokens, every one taken on the three servers in turn before the next, "
            "the order rotating and reversing from one to the next); timed on the client. Medians over "
            "the rounds (quartiles in brackets); ratios are ours against each mlx_lm.server within the "
            "same round, >= 1 as good or better.",
            f"Started as: {started} (prefill of a fresh ~440-token prompt, TTFT of one token).",
            "",
            f"| figure | {ours.title} | {same.title} | {shipped.title} | ours vs same footing "
            "| ours vs as shipped |",
            "|---|---|---|---|---|---|",
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
