"""Model benchmarks: a short fixed run of a model through the server's engine (the server's
`benchmark_model`, through the facade), started from a model's page as a background job
(services/jobs.py) with its progress, or by `mlx-manager models bench`; every run's figures are
kept in `model_benchmarks` and shown as one table across models.

One benchmark runs at a time, whatever the model: two at once would share the machine and each
measure less than the model does.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import asdict, dataclass
from functools import cache
from typing import Literal

from sqlmodel import Session, col, select

from mlx_manager.records import ModelBenchmark
from mlx_manager.services.jobs import Job, JobRegistry
from mlx_server.facade import (
    BENCHMARK_SIZES,
    APIError,
    BenchmarkFigures,
    BenchmarkProgress,
    background_session,
    benchmark_model,
    check_benchmark,
)

MAX_ROWS = 500  # the table's newest runs
BENCHMARKABLE = ("text-gen", "vision")  # the model types a run measures
RUN_SIZES = BENCHMARK_SIZES  # the run-size inputs' defaults and bounds, for the forms


@dataclass(eq=False)
class BenchmarkJob(Job[str]):
    """A benchmark of the model `key`."""

    prompt_tokens: int = BENCHMARK_SIZES.prompt_tokens
    generated_tokens: int = BENCHMARK_SIZES.generated_tokens
    status: Literal["running", "done", "failed", "cancelled"] = "running"
    progress: BenchmarkProgress | None = None
    result: ModelBenchmark | None = None
    error: str | None = None

    @property
    def model_id(self) -> str:
        return self.key

    @property
    def percent(self) -> int:
        """Loading and warm-up take the first tenth, the prompt the next, then each token."""
        progress = self.progress
        if progress is None or progress.stage in ("loading", "warm-up"):
            return 0 if progress is None or progress.stage == "loading" else 10
        if progress.stage == "prefill":
            return 20
        return 20 + int(80 * progress.done / max(progress.total, 1))

    @property
    def stage(self) -> str:
        progress = self.progress
        if progress is None:
            return "starting"
        if progress.stage == "decode":
            return f"decoding {progress.done} of {progress.total} tokens"
        if progress.stage == "prefill":
            return f"prefilling {progress.total} prompt tokens"
        return progress.stage

    def settle(self, error: BaseException | None) -> None:
        if isinstance(error, asyncio.CancelledError):
            self.status, self.error = "cancelled", "The app stopped during the benchmark; run it again."
        elif error is not None and self.stop.is_set():  # the run's BenchmarkStopped
            self.status, self.error = "cancelled", "Stopped; nothing was kept."
        elif isinstance(error, APIError):
            self.status, self.error = "failed", error.message
        elif error is not None:
            self.status, self.error = "failed", f"{type(error).__name__}: {error}"
        else:
            self.status = "done"


BenchmarkJobs = JobRegistry[str, BenchmarkJob]


@cache
def get_benchmark_jobs() -> BenchmarkJobs:
    return BenchmarkJobs()


reset_benchmark_jobs = get_benchmark_jobs.cache_clear


def running_benchmark() -> BenchmarkJob | None:
    return next((job for job in get_benchmark_jobs().jobs() if not job.finished), None)


def start_benchmark(model_id: str, *, prompt_tokens: int, generated_tokens: int) -> BenchmarkJob:
    """Check the run (APIError says what to change), then run it in the background."""
    running = running_benchmark()
    if running is not None:
        raise APIError(
            409,
            f"A benchmark of {running.model_id} is running; start this one when it ends (two at "
            "once would slow each other down).",
        )
    check_benchmark(model_id, prompt_tokens, generated_tokens)
    job = BenchmarkJob(model_id, prompt_tokens=prompt_tokens, generated_tokens=generated_tokens)
    return get_benchmark_jobs().start(job, _benchmark)


async def _benchmark(job: BenchmarkJob) -> None:
    def on_progress(progress: BenchmarkProgress) -> None:
        job.progress = progress
        job.notify()

    job.result = await run_benchmark(
        job.model_id,
        on_progress,
        prompt_tokens=job.prompt_tokens,
        generated_tokens=job.generated_tokens,
        should_stop=job.stop.is_set,
    )


async def run_benchmark(
    model_id: str,
    on_progress: Callable[[BenchmarkProgress], None],
    *,
    prompt_tokens: int = BENCHMARK_SIZES.prompt_tokens,
    generated_tokens: int = BENCHMARK_SIZES.generated_tokens,
    should_stop: Callable[[], bool] = lambda: False,
) -> ModelBenchmark:
    """Run the benchmark and keep its figures (the job's work, and the CLI's)."""
    figures = await benchmark_model(
        model_id,
        on_progress,
        prompt_tokens=prompt_tokens,
        generated_tokens=generated_tokens,
        should_stop=should_stop,
    )
    return await asyncio.to_thread(save_benchmark, figures)


def save_benchmark(figures: BenchmarkFigures) -> ModelBenchmark:
    with background_session() as session:
        row = ModelBenchmark(**asdict(figures))
        session.add(row)
        session.commit()
        session.refresh(row)
        session.expunge(row)
        return row


def benchmark_rows(session: Session, model_id: str | None = None) -> list[ModelBenchmark]:
    """The newest runs first, of every model or of one."""
    query = select(ModelBenchmark).order_by(col(ModelBenchmark.id).desc()).limit(MAX_ROWS)
    if model_id is not None:
        query = query.where(ModelBenchmark.model_id == model_id)
    return list(session.exec(query))


def delete_benchmark(session: Session, run_id: int) -> bool:
    row = session.get(ModelBenchmark, run_id)
    if row is None:
        return False
    session.delete(row)
    session.commit()
    return True


def stop_benchmark(model_id: str) -> BenchmarkJob | None:
    """Ask the model's running benchmark to stop (its generation leaves the batch)."""
    job = get_benchmark_jobs().running(model_id)
    if job is not None:
        job.stop.set()
    return job


@asynccontextmanager
async def benchmark_services() -> AsyncIterator[None]:
    """For the app's lifespan: a run still going at shutdown is cancelled (before the server
    unloads its models)."""
    reset_benchmark_jobs()
    try:
        yield
    finally:
        await get_benchmark_jobs().shutdown()
        reset_benchmark_jobs()
