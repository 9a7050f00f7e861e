"""A model's benchmark: a short fixed run through the server's own engine, like llama-bench's
pp512 / tg128 or `mlx_lm.benchmark`: prefill and decode tokens per second, time to first token,
peak memory.

The run goes through `generate_text` (the batch engine, as every request does) with a prompt of
random token ids, drawn afresh for each run so that no prompt-cache entry can serve any of it,
and the model's stop tokens banned, so exactly the asked number of tokens is decoded (greedy).
A short warm-up first (kernels compiled, buffers allocated) is not counted. Memory is MLX's peak
during the timed run (weights, KV cache and activations; other requests running at the same
time count in it too, as they slow the run: benchmark an idle server).
"""

from __future__ import annotations

import platform
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from importlib.metadata import version

import mlx.core as mx

from mlx_server import __version__
from mlx_server.errors import APIError
from mlx_server.models.detection import ModelType
from mlx_server.models.loaders import LoadedModel, read_spec
from mlx_server.models.pool import get_model_pool
from mlx_server.services.pipeline.engine.generation import generate_text
from mlx_server.services.pipeline.engine.params import CompletionStats, GenerationParams, SamplingParams
from mlx_server.services.pipeline.inference import open_model
from mlx_server.utils.metal import run_on_metal_thread

WARMUP_PROMPT_TOKENS = 16
WARMUP_GENERATED_TOKENS = 4
BANNED = -1e9  # the logit bias of a stop token: never sampled


@dataclass(frozen=True)
class BenchmarkSizes:
    """A run's default sizes, and their bounds."""

    prompt_tokens: int = 512  # llama-bench's pp512
    generated_tokens: int = 128  # and tg128
    max_prompt_tokens: int = 16384
    max_generated_tokens: int = 2048


BENCHMARK_SIZES = BenchmarkSizes()


class BenchmarkStopped(Exception):
    """The run was asked to stop (its generation left the batch; nothing was measured)."""


@dataclass(frozen=True)
class BenchmarkProgress:
    """Where a run stands: a stage ("loading", "warm-up", "prefill", "decode") and its tokens."""

    stage: str
    done: int = 0
    total: int = 0


@dataclass(frozen=True)
class BenchmarkFigures:
    model_id: str
    prompt_tokens: int
    generated_tokens: int
    ttft_s: float
    prefill_tokens_per_s: float
    decode_tokens_per_s: float
    peak_memory_bytes: int
    model_bytes: int
    load_s: float | None  # None: it was loaded already
    device: str
    versions: str  # ours and MLX's


def check_benchmark(model_id: str, prompt_tokens: int, generated_tokens: int) -> None:
    """Refuse, before anything loads, a run that cannot be made: sizes out of range, an unknown
    model (ModelNotFoundError), or one that does not generate text."""
    most_prompt, most_generated = BENCHMARK_SIZES.max_prompt_tokens, BENCHMARK_SIZES.max_generated_tokens
    if not 1 <= prompt_tokens <= most_prompt:
        raise APIError(400, f"prompt_tokens must be 1 to {most_prompt}.", param="prompt_tokens")
    if not 2 <= generated_tokens <= most_generated:
        raise APIError(400, f"generated_tokens must be 2 to {most_generated}.", param="generated_tokens")
    model_type = read_spec(model_id).model_type
    if model_type not in (ModelType.TEXT_GEN, ModelType.VISION):
        raise APIError(
            400,
            f"Benchmarks measure text generation; {model_id!r} is a {model_type} model.",
            param="model",
            code="wrong_model_type",
        )


def device_name() -> str:
    """The chip MLX runs on (Metal's device name), else the CPU's architecture."""
    info = mx.device_info() if hasattr(mx, "device_info") else {}
    name = info.get("device_name")
    if isinstance(name, str) and name:
        return name
    return f"CPU {platform.machine()} ({platform.system()})"


async def benchmark_model(
    model_id: str,
    on_progress: Callable[[BenchmarkProgress], None] = lambda _: None,
    *,
    prompt_tokens: int = BENCHMARK_SIZES.prompt_tokens,
    generated_tokens: int = BENCHMARK_SIZES.generated_tokens,
    should_stop: Callable[[], bool] = lambda: False,
) -> BenchmarkFigures:
    """Run the benchmark on `model_id` (loaded if needed; it stays loaded). `should_stop` is
    asked at every token: true ends the run with BenchmarkStopped."""
    check_benchmark(model_id, prompt_tokens, generated_tokens)
    on_progress(BenchmarkProgress("loading"))
    was_loaded = get_model_pool().get_loaded(model_id) is not None
    started = time.perf_counter()
    loaded, release = await open_model(model_id)
    load_s = None if was_loaded else time.perf_counter() - started
    try:
        _check_context(loaded, prompt_tokens + generated_tokens)
        on_progress(BenchmarkProgress("warm-up"))
        await _run(loaded, WARMUP_PROMPT_TOKENS, WARMUP_GENERATED_TOKENS, should_stop)
        await run_on_metal_thread(mx.reset_peak_memory)
        stats = await _run(loaded, prompt_tokens, generated_tokens, should_stop, on_progress)
        peak = await run_on_metal_thread(mx.get_peak_memory)
    finally:
        release()
    if stats.ttft_s is None or stats.decode_tokens_per_s is None:  # cannot happen with banned stops
        raise APIError(500, f"The run of {model_id!r} generated {stats.completion_tokens} tokens.")
    return BenchmarkFigures(
        model_id=model_id,
        prompt_tokens=prompt_tokens,
        generated_tokens=stats.completion_tokens,
        ttft_s=stats.ttft_s,
        prefill_tokens_per_s=prompt_tokens / stats.ttft_s,
        decode_tokens_per_s=stats.decode_tokens_per_s,
        peak_memory_bytes=int(peak),
        model_bytes=loaded.size_bytes,
        load_s=load_s,
        device=device_name(),
        versions=f"mlx-server {__version__}, mlx {version('mlx')}",
    )


def _check_context(loaded: LoadedModel, tokens: int) -> None:
    context = loaded.context_length
    if context is not None and tokens > context:
        raise APIError(
            400,
            f"{loaded.model_id!r} has a context of {context} tokens; ask for fewer than {tokens} "
            "prompt and generated tokens together.",
            param="prompt_tokens",
        )


async def _run(
    loaded: LoadedModel,
    prompt_tokens: int,
    generated_tokens: int,
    should_stop: Callable[[], bool],
    on_progress: Callable[[BenchmarkProgress], None] | None = None,
) -> CompletionStats:
    """One generation of exactly `generated_tokens` after a random prompt; its figures."""
    vocabulary = loaded.chat.vocabulary_size
    draw = random.Random()
    prompt = [draw.randrange(vocabulary) for _ in range(prompt_tokens)]
    banned = {token: BANNED for token in loaded.chat.get_stop_tokens()}
    sampling = SamplingParams(temperature=0.0, logit_bias=banned)
    params = GenerationParams(max_tokens=generated_tokens, sampling=sampling)
    stats = CompletionStats()
    if on_progress is not None:
        on_progress(BenchmarkProgress("prefill", 0, prompt_tokens))
    pieces = generate_text(loaded, prompt, params, generated_tokens, stats)
    try:
        async for _ in pieces:
            if should_stop():
                raise BenchmarkStopped(f"The benchmark of {loaded.model_id!r} was stopped.")
            if on_progress is not None:
                on_progress(BenchmarkProgress("decode", stats.completion_tokens, generated_tokens))
    finally:
        await pieces.aclose()
    return stats
