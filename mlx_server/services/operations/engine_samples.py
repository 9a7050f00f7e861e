"""The engine's figures over the last hour, for the Server page's charts.

A scheduled job (`server_services()` starts it with the scheduler) takes one `EngineSample`
every MLX_SERVER_ENGINE_SAMPLE_SECONDS: the tokens decoded (and how many came from drafts) and
prefilled since the previous sample (the differences of utils/engine_counters.py), the prompt
tokens the prompt cache served, and what is true right now: the generations admitted (the queue
depth `/metrics` reports), the sequences the batches are decoding or prefilling, MLX's active
memory and the pool's. Samples
live in a ring bounded to an hour, in memory only: a sample is a handful of integers, an hour
of them at the default two seconds is 1 800. Taking one reads counters and the pool, on the
event loop (where the counters are written), and costs nothing on the token path.
"""

from __future__ import annotations

import math
import time
from collections import deque
from dataclasses import dataclass, replace

from mlx_server.config import get_settings
from mlx_server.models.pool import get_model_pool
from mlx_server.services.operations.scheduler import schedule_every
from mlx_server.services.pipeline.engine.batching import batch_figures
from mlx_server.services.pipeline.engine.generation import admission
from mlx_server.utils.engine_counters import engine_counters
from mlx_server.utils.memory import active_memory_bytes

KEEP_SECONDS = 3600.0
ENGINE_SAMPLES_JOB = "engine-samples"


@dataclass(frozen=True)
class EngineSample:
    """The engine over `seconds` ending at `at` (wall clock), and its state at `at`."""

    at: float
    seconds: float
    generated_tokens: int
    drafted_tokens: int  # of the generated, those a draft proposed (prompt lookup, a draft model)
    prefilled_tokens: int  # prompt tokens computed (not served by the prompt cache)
    prompt_tokens: int  # prompt tokens of the generations that started (cached included)
    cached_prompt_tokens: int
    queue_depth: int  # generations admitted and not finished (running or waiting)
    running: int  # sequences decoding or prefilling in a batch
    mlx_memory_bytes: int  # MLX's active memory: weights, KV caches, activations
    pool_bytes: int  # the pool's weights and prompt caches

    @property
    def decode_tokens_per_s(self) -> float:
        return self.generated_tokens / self.seconds if self.seconds > 0 else 0.0

    @property
    def prefill_tokens_per_s(self) -> float:
        return self.prefilled_tokens / self.seconds if self.seconds > 0 else 0.0

    @property
    def cache_hit_rate(self) -> float | None:
        """The share of prompt tokens served from the prompt cache; None with no prompt."""
        return self.cached_prompt_tokens / self.prompt_tokens if self.prompt_tokens else None


def _running_sequences() -> int:
    return sum(figures["running"] + figures["prefilling"] for figures in batch_figures().values())


class EngineSampler:
    """Takes samples and keeps the last `keep_seconds` of them."""

    def __init__(self, interval_s: float, keep_seconds: float = KEEP_SECONDS) -> None:
        self.interval_s = interval_s
        self._samples: deque[EngineSample] = deque(maxlen=math.ceil(keep_seconds / interval_s) + 1)
        self._last = replace(engine_counters)
        self._last_at = time.monotonic()

    def sample(self) -> EngineSample:
        now = time.monotonic()
        current = replace(engine_counters)
        last, self._last, self._last_at, seconds = self._last, current, now, now - self._last_at
        prompt_tokens = current.prompt_tokens - last.prompt_tokens
        cached = current.cached_prompt_tokens - last.cached_prompt_tokens
        sample = EngineSample(
            at=time.time(),
            seconds=seconds,
            generated_tokens=current.generated_tokens - last.generated_tokens,
            drafted_tokens=current.drafted_tokens - last.drafted_tokens,
            prefilled_tokens=prompt_tokens - cached,
            prompt_tokens=prompt_tokens,
            cached_prompt_tokens=cached,
            queue_depth=admission.pending,
            running=_running_sequences(),
            mlx_memory_bytes=active_memory_bytes(),
            pool_bytes=get_model_pool().used_bytes,
        )
        self._samples.append(sample)
        return sample

    def recent(self, seconds: float) -> list[EngineSample]:
        """The samples of the last `seconds`, oldest first."""
        since = time.time() - seconds
        return [sample for sample in self._samples if sample.at > since]


_sampler: EngineSampler | None = None


def get_engine_sampler() -> EngineSampler:
    """The process's sampler (made on first use, with the settings' interval)."""
    global _sampler
    if _sampler is None:
        _sampler = EngineSampler(get_settings().engine_sample_seconds)
    return _sampler


def start_engine_sampling() -> None:
    """A fresh ring, sampled by a scheduler job (the scheduler is started by its owner)."""
    global _sampler
    _sampler = sampler = EngineSampler(get_settings().engine_sample_seconds)

    async def take_sample() -> None:  # a coroutine: it runs on the loop, where the counters are
        sampler.sample()

    schedule_every(take_sample, job_id=ENGINE_SAMPLES_JOB, seconds=sampler.interval_s)


def engine_samples(seconds: float = KEEP_SECONDS) -> list[EngineSample]:
    """What the Server page draws: the samples of the last `seconds` (at most an hour)."""
    return get_engine_sampler().recent(min(seconds, KEEP_SECONDS))
