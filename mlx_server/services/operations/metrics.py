"""Prometheus metrics (blueprint §13.1): what the server did, and what it holds right now.

One `ServerMetrics` per app, each with its own registry (never prometheus-client's global one,
so two apps in one process, as in the tests, count apart). Request figures are counted from the
audit rows as they are recorded (api/audit_middleware.py): every /v1 request is counted once,
with the same endpoint, model, status, tokens and times as its audit row. Pool, queue and
prompt-cache figures and the remote backends' circuit breakers are read when scraped
(`_StateCollector`), never kept twice.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from fnmatch import fnmatchcase

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector
from sqlmodel import Session

from mlx_server.database import background_session
from mlx_server.models.pool import get_model_pool
from mlx_server.records import AuditLog, LoraAdapter, ModelRecord
from mlx_server.services.pipeline.engine.generation import admission
from mlx_server.services.remote.backends import list_backends, list_rules
from mlx_server.services.remote.breaker import BreakerState, breaker

PREFIX = "mlx_server"
# Seconds. TTFT on a CPU runs from ~50 ms (cached prefix) to minutes (a long prefill).
TTFT_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)
LATENCY_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600)
NO_MODEL = ""  # the label of requests that named no model (GET /v1/models, refusals)
# The label of a model that is neither registered nor matched by a routing rule: names a client
# makes up must not each make a series (a label value lives as long as the process).
UNKNOWN_MODEL = "unknown"
LABEL_TTL_S = 5.0  # how long a name's label is reused before the database is asked again
MAX_CACHED_LABELS = 1024


def _model_label(session: Session, model: str) -> str:
    """`model` if it is registered (a local model, a LoRA adapter, a remote `backend/model`),
    else the pattern of the routing rule that takes it, else UNKNOWN_MODEL."""
    if session.get(ModelRecord, model) is not None or session.get(LoraAdapter, model) is not None:
        return model
    if any(f"{b.name}/{m}" == model for b in list_backends(session) for m in b.models):
        return model
    rule = next((r for r in list_rules(session) if fnmatchcase(model, r.pattern)), None)
    return rule.pattern if rule is not None else UNKNOWN_MODEL


class ModelLabels:
    """The `model` label of counted requests (`_model_label`), each name's decision reused for
    LABEL_TTL_S so a known model costs a dictionary lookup, not a query."""

    def __init__(self) -> None:
        self._labels: dict[str, tuple[str, float]] = {}

    def __call__(self, model: str | None) -> str:
        if not model:
            return NO_MODEL
        now = time.monotonic()
        cached = self._labels.get(model)
        if cached is not None and now - cached[1] < LABEL_TTL_S:
            return cached[0]
        with background_session() as session:
            label = _model_label(session, model)
        if len(self._labels) >= MAX_CACHED_LABELS:
            self._labels.clear()
        self._labels[model] = (label, now)
        return label


class _StateCollector(Collector):
    """Gauges read from the pool and the admission control at scrape time."""

    def collect(self) -> Iterable[GaugeMetricFamily | CounterMetricFamily]:
        pool = get_model_pool()
        status = pool.status()
        yield _gauge(
            "pool_memory_used_bytes", "Weights and prompt caches the pool holds.", status["used_bytes"]
        )
        yield _gauge("pool_memory_budget_bytes", "The pool's memory budget.", status["budget_bytes"])
        yield _gauge(
            "prompt_cache_bytes", "KV caches kept for prompt-prefix reuse.", status["prompt_cache_bytes"]
        )
        yield _gauge("models_loaded", "Models loaded in the pool.", len(status["models"]))
        yield _gauge(
            "queue_depth",
            "Generations admitted and not finished (running or waiting for the MLX thread).",
            admission.pending,
        )
        sizes = GaugeMetricFamily(
            f"{PREFIX}_model_size_bytes", "Memory of each loaded model's weights.", labels=["model", "type"]
        )
        hits = CounterMetricFamily(
            f"{PREFIX}_prompt_cache_hits",
            "Requests that reused a cached prompt prefix, per loaded model (since its load).",
            labels=["model"],
        )
        reused = CounterMetricFamily(
            f"{PREFIX}_prompt_cache_reused_tokens",
            "Prompt tokens served from the prompt cache instead of prefilled (since the model's load).",
            labels=["model"],
        )
        for model in status["models"]:
            sizes.add_metric([model["id"], model["type"]], model["size_bytes"])
            hits.add_metric([model["id"]], model["prompt_cache"]["hits"])
            reused.add_metric([model["id"]], model["prompt_cache"]["reused_tokens"])
        yield from (sizes, hits, reused)
        yield from _breaker_families()


def _breaker_families() -> Iterable[GaugeMetricFamily]:
    """Each remote backend's circuit breaker (services/remote/breaker.py): 1 on its state."""
    with background_session() as session:
        names = [backend.name for backend in list_backends(session)]
    states = GaugeMetricFamily(
        f"{PREFIX}_backend_breaker_state",
        "Circuit breaker of each remote backend: 1 for its current state (closed, open, half-open).",
        labels=["backend", "state"],
    )
    failures = GaugeMetricFamily(
        f"{PREFIX}_backend_consecutive_failures",
        "Failures or timeouts in a row of each remote backend (its breaker opens at the limit).",
        labels=["backend"],
    )
    for name in names:
        circuit = breaker(name)
        current = circuit.state
        for state in BreakerState:
            states.add_metric([name, state.value], 1 if state is current else 0)
        failures.add_metric([name], circuit.failures)
    return (states, failures)


def _gauge(name: str, documentation: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(f"{PREFIX}_{name}", documentation, value=value)


class ServerMetrics:
    """The counters and histograms of one app, and its registry (see the module docstring)."""

    def __init__(self, extra_collectors: Iterable[Collector] = ()) -> None:
        # auto_describe off: the state collector reads the pool and database only when scraped.
        self.registry = CollectorRegistry(auto_describe=False)
        registry = self.registry
        self.requests = Counter(
            f"{PREFIX}_requests",
            "Requests to /v1 by endpoint, model and HTTP status.",
            ["endpoint", "model", "status"],
            registry=registry,
        )
        self.prompt_tokens = Counter(
            f"{PREFIX}_prompt_tokens", "Prompt tokens processed.", ["model"], registry=registry
        )
        self.completion_tokens = Counter(
            f"{PREFIX}_completion_tokens", "Tokens generated.", ["model"], registry=registry
        )
        self.ttft = Histogram(
            f"{PREFIX}_time_to_first_token_seconds",
            "From a request's arrival to its first generated token.",
            ["model"],
            buckets=TTFT_BUCKETS,
            registry=registry,
        )
        self.latency = Histogram(
            f"{PREFIX}_request_duration_seconds",
            "From a request's arrival to its last byte sent.",
            ["endpoint"],
            buckets=LATENCY_BUCKETS,
            registry=registry,
        )
        registry.register(_StateCollector())
        for collector in extra_collectors:
            registry.register(collector)
        self.model_label = ModelLabels()

    def observe(self, row: AuditLog, endpoint: str) -> None:
        """Count one finished request; `endpoint` is its route ("POST /v1/models/{model_id}"),
        so ids in paths do not make a series each, and its model a registered one's id, a
        routing rule's pattern or "unknown"."""
        model = self.model_label(row.model)
        self.requests.labels(endpoint, model, str(row.status)).inc()
        if row.prompt_tokens:
            self.prompt_tokens.labels(model).inc(row.prompt_tokens)
        if row.completion_tokens:
            self.completion_tokens.labels(model).inc(row.completion_tokens)
        if row.ttft_ms is not None:
            self.ttft.labels(model).observe(row.ttft_ms / 1000)
        if row.latency_ms is not None:
            self.latency.labels(endpoint).observe(row.latency_ms / 1000)

    def exposition(self) -> bytes:
        """The registry in Prometheus' text format."""
        return generate_latest(self.registry)
