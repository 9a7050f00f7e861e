"""The Server page's charts: the engine's samples (the server's sampler, through the facade) as
small line charts, drawn here as SVG coordinates for `partials/server_charts.html`: no script
and no chart library in the page.

A span (the last 5, 15 or 60 minutes) is cut into at most MAX_COLUMNS columns, never narrower
than the sampling interval; each column's figure is its samples' tokens over their seconds for
rates, the largest value for levels (a queue that lasted one sample still shows), and the
cached share of its prompt tokens for the hit rate (no prompt: no point, a gap in the line), the
drafted share of its generated tokens likewise.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from mlx_manager.web.templating import filesize
from mlx_server.facade import EngineSample

WIDTH, HEIGHT = 300.0, 60.0
SPANS = {5: "5 min", 15: "15 min", 60: "1 hour"}
DEFAULT_MINUTES = 60
MAX_COLUMNS = 180

Figure = Callable[[Sequence[EngineSample]], float | None]


def _rate(tokens: Callable[[EngineSample], int]) -> Figure:
    def figure(samples: Sequence[EngineSample]) -> float:
        seconds = sum(s.seconds for s in samples)
        return sum(tokens(s) for s in samples) / seconds if seconds > 0 else 0.0

    return figure


def _level(value: Callable[[EngineSample], int]) -> Figure:
    return lambda samples: float(max(value(s) for s in samples))


def _hit_rate(samples: Sequence[EngineSample]) -> float | None:
    prompt = sum(s.prompt_tokens for s in samples)
    return 100 * sum(s.cached_prompt_tokens for s in samples) / prompt if prompt else None


def _drafted(samples: Sequence[EngineSample]) -> float | None:
    generated = sum(s.generated_tokens for s in samples)
    return 100 * sum(s.drafted_tokens for s in samples) / generated if generated else None


def _tokens_per_s(value: float) -> str:
    return f"{value:.0f} tok/s" if value >= 100 else f"{value:.1f} tok/s"


@dataclass(frozen=True)
class Metric:
    key: str
    title: str
    note: str
    series: tuple[tuple[str, Figure], ...]  # (label, figure); the first is the headline
    label: Callable[[float], str]
    floor: float  # the smallest top of the scale (an idle chart is flat at the bottom)
    fixed_top: float | None = None
    unit: float = 1.0  # the top is a round number of these (GiB for memory)


METRICS = (
    Metric(
        "decode",
        "Decode",
        "tokens generated per second, all generations together",
        (("decode", _rate(lambda s: s.generated_tokens)),),
        _tokens_per_s,
        1.0,
    ),
    Metric(
        "prefill",
        "Prompt (prefill)",
        "prompt tokens computed per second (the prompt cache's are not)",
        (("prefill", _rate(lambda s: s.prefilled_tokens)),),
        _tokens_per_s,
        1.0,
    ),
    Metric(
        "queue",
        "Queue depth",
        "generations admitted and not finished, running or waiting (/metrics' queue_depth)",
        (("queue", _level(lambda s: s.queue_depth)),),
        lambda v: f"{v:.0f}",
        1.0,
    ),
    Metric(
        "running",
        "Running sequences",
        "sequences the batches decode or prefill",
        (("running", _level(lambda s: s.running)),),
        lambda v: f"{v:.0f}",
        1.0,
    ),
    Metric(
        "cache",
        "Prompt-cache hit rate",
        "share of prompt tokens served from the prompt cache",
        (("hit rate", _hit_rate),),
        lambda v: f"{v:.0f} %",
        1.0,
        fixed_top=100.0,
    ),
    Metric(
        "drafts",
        "Tokens from drafts",
        "share of generated tokens proposed by prompt lookup or a draft model and kept",
        (("from drafts", _drafted),),
        lambda v: f"{v:.0f} %",
        1.0,
        fixed_top=100.0,
    ),
    Metric(
        "memory",
        "Memory",
        "MLX's active memory (weights, caches, activations); the pool's weights and prompt caches",
        (("MLX active", _level(lambda s: s.mlx_memory_bytes)), ("pool", _level(lambda s: s.pool_bytes))),
        filesize,
        float(1024**2),
        unit=float(1024**3),
    ),
)


@dataclass(frozen=True)
class Series:
    label: str
    lines: list[str]  # SVG polyline points, one string per unbroken run
    areas: list[str]  # the polygon under each run


@dataclass(frozen=True)
class Chart:
    key: str
    title: str
    note: str
    series: list[Series]
    now: float  # the latest sample's headline figure (0 with none)
    now_label: str
    peak_label: str
    top_label: str


def _nice_top(value: float) -> float:
    """1, 2 or 5 times a power of ten, at least `value`."""
    power = 10.0 ** math.floor(math.log10(value))
    return next(step * power for step in (1, 2, 5, 10) if step * power >= value)


def _columns(samples: Sequence[EngineSample], span_s: float, interval_s: float) -> list[list[EngineSample]]:
    width = max(span_s / MAX_COLUMNS, interval_s)
    start = samples[-1].at - span_s if samples else 0.0
    columns: dict[int, list[EngineSample]] = {}
    for sample in samples:
        columns.setdefault(int((sample.at - start) // width), []).append(sample)
    return [columns[index] for index in sorted(columns)]


def _runs(points: list[tuple[float, float | None]], gap_s: float) -> list[list[tuple[float, float]]]:
    """Points cut where a value is missing or time jumps (the server was not sampling)."""
    runs: list[list[tuple[float, float]]] = []
    last_at: float | None = None
    for at, value in points:
        if value is None:
            last_at = None
            continue
        if last_at is None or at - last_at > gap_s:
            runs.append([])
        runs[-1].append((at, value))
        last_at = at
    return runs


def _series(
    label: str, runs: list[list[tuple[float, float]]], start: float, span_s: float, top: float
) -> Series:
    lines, areas = [], []
    for run in runs:
        points = [(WIDTH * (at - start) / span_s, HEIGHT * (1 - min(value, top) / top)) for at, value in run]
        if points[-1][0] - points[0][0] < 1.5:  # a lone point, or a few close together: a dash
            points.insert(0, (points[-1][0] - 1.5, points[0][1]))
        line = " ".join(f"{x:.1f},{y:.1f}" for x, y in points)
        lines.append(line)
        areas.append(f"{points[0][0]:.1f},{HEIGHT} {line} {points[-1][0]:.1f},{HEIGHT}")
    return Series(label, lines, areas)


def _chart(metric: Metric, columns: list[list[EngineSample]], span_s: float, gap_s: float) -> Chart:
    end = columns[-1][-1].at if columns else 0.0
    start = end - span_s
    valued = [[(column[-1].at, figure(column)) for column in columns] for _, figure in metric.series]
    peak = max((v for points in valued for _, v in points if v is not None), default=0.0)
    top = metric.fixed_top or metric.unit * _nice_top(max(peak, metric.floor) / metric.unit)
    series = [
        _series(label, _runs(points, gap_s), start, span_s, top)
        for (label, _), points in zip(metric.series, valued, strict=True)
    ]
    series = [s for s in series if s.lines] if columns else []
    # Now is the latest sample alone; the line and its peak average each column's samples.
    now = metric.series[0][1](columns[-1][-1:]) if columns else None
    return Chart(
        key=metric.key,
        title=metric.title,
        note=metric.note,
        series=series,
        now=now or 0.0,
        now_label="–" if now is None else metric.label(now),
        peak_label=metric.label(max(peak, now or 0.0)),
        top_label=metric.label(top),
    )


def engine_charts(samples: Sequence[EngineSample], minutes: int, interval_s: float) -> list[Chart]:
    """The charts of the last `minutes` of `samples` (oldest first)."""
    span_s = minutes * 60.0
    columns = _columns(samples, span_s, interval_s)
    gap_s = 3 * max(span_s / MAX_COLUMNS, interval_s)
    return [_chart(metric, columns, span_s, gap_s) for metric in METRICS]
