"""Token generation on the MLX thread, as a stream of text deltas.

One seam for every protocol (`generate_text`): a text model's generations decode together in its
continuous batch (batching.py); what cannot batch (`runs_solo`: vision models, a draft model
or kv_bits, caches that cannot merge) runs its own mlx-lm `generate_step` (or mlx-vlm,
speculative.py) loop, one token per job. Both
use our sampler, the adapter's stop tokens and per-token logprobs on request; stop strings are
held back here until they can no longer match. Admission control bounds how many generations
wait for the MLX thread.
"""

from __future__ import annotations

import time
from collections.abc import AsyncGenerator, Generator, Iterator
from contextlib import nullcontext
from typing import Any

import mlx.core as mx
from mlx_lm.generate import generate_step

from mlx_server.config import get_settings
from mlx_server.errors import APIError
from mlx_server.models.detection import ModelType
from mlx_server.models.loaders import LoadedModel
from mlx_server.services.pipeline.engine.batching import batched_steps, can_batch
from mlx_server.services.pipeline.engine.constraints import GrammarProcessor
from mlx_server.services.pipeline.engine.params import CompletionStats, GeneratedText, GenerationParams
from mlx_server.services.pipeline.engine.sampling import sampling_for
from mlx_server.services.pipeline.engine.sequence import BatchedSequence
from mlx_server.services.pipeline.engine.speculative import (
    Tokens,
    drafts_for,
    kv_quantization,
    speculative_token_stream,
    uses_generation_options,
)
from mlx_server.services.pipeline.engine.stop_strings import StopStringFilter
from mlx_server.services.pipeline.engine.token_text import TokenDecoder, TokenStep
from mlx_server.services.pipeline.engine.vision import VisionInputs, text_inputs, vision_token_steps
from mlx_server.utils.engine_counters import engine_counters
from mlx_server.utils.metal import stream_on_metal_thread

# Seconds a client told "busy" should wait before retrying.
OVERLOAD_RETRY_AFTER_SECONDS = 2


class Admission:
    """Bounds the generations admitted at once; the next one is told to retry (503).

    Held for a request's whole life (model load, prefill, every streamed token), released
    exactly once, also by a stream that is dropped before it starts.
    """

    def __init__(self) -> None:
        self.pending = 0

    def acquire(self) -> None:
        limit = get_settings().max_pending_requests
        if self.pending >= limit:
            raise APIError(
                503,
                f"The server is busy ({self.pending} generations running or queued, limit {limit}); "
                f"retry in {OVERLOAD_RETRY_AFTER_SECONDS} s.",
                code="server_busy",
                headers={"Retry-After": str(OVERLOAD_RETRY_AFTER_SECONDS)},
            )
        self.pending += 1

    def release(self) -> None:
        self.pending -= 1


admission = Admission()


def _token_stream(
    loaded: LoadedModel,
    prompt: list[int],
    params: GenerationParams,
    max_tokens: int,
    constraint: GrammarProcessor | None,
    vision: VisionInputs | None,
    stats: CompletionStats,
) -> tuple[Tokens, list[Any] | None, int]:
    """(token, logprobs, drafted) triples from mlx-lm's loop (text models, with the prompt cache: the cache
    and the tokens it reused) or mlx-vlm's (vision models: images, no prompt cache)."""
    sampler, processors = sampling_for(params.sampling, constraint)
    if loaded.model_type is ModelType.VISION:
        inputs = vision or text_inputs(prompt)
        steps = vision_token_steps(
            loaded, inputs, max_tokens=max_tokens, sampler=sampler, logits_processors=processors
        )
        return _undrafted(steps), None, 0
    if drafts_for(loaded):  # speculative decoding with the model's draft (speculative.py)
        return speculative_token_stream(loaded, prompt, max_tokens, sampler, processors)
    cache, reused = loaded.prompt_cache.take(loaded.model, prompt)
    tokens = generate_step(
        mx.array(prompt[reused:]),
        loaded.model,
        max_tokens=max_tokens,
        sampler=sampler,
        logits_processors=processors,
        prompt_cache=cache,
        **kv_quantization(loaded),  # the model's kv_bits, if set (speculative.py)
    )
    return _undrafted(tokens), cache, reused


def _undrafted(tokens: Generator[tuple[int, mx.array], None, None]) -> Tokens:
    """A loop's tokens, none of them drafted (the speculative stream's shape)."""
    try:
        for token, logprobs in tokens:
            yield token, logprobs, None
    finally:
        tokens.close()


def _steps(
    loaded: LoadedModel,
    prompt: list[int],
    params: GenerationParams,
    max_tokens: int,
    constraint: GrammarProcessor | None,
    stats: CompletionStats,
    vision: VisionInputs | None = None,
) -> Iterator[TokenStep]:
    """The solo token loop; runs on the MLX thread, one item per job."""
    decoder = TokenDecoder(loaded, params, max_tokens)
    tokens, cache, reused = _token_stream(loaded, prompt, params, max_tokens, constraint, vision, stats)
    stats.cached_prompt_tokens = reused
    fed = list(prompt)  # what the cache has seen (or will have): the prompt, then each token
    failed = False
    try:
        for token, logprobs, drafted in tokens:
            fed.append(token)
            yield from decoder.decode(token, logprobs, drafted)
            if decoder.finished:
                return
        yield decoder.finish("length")  # the loop ran out of tokens first
    except Exception:
        failed = True  # a step that failed midway may have left layers of the cache uneven
        raise
    finally:
        tokens.close()
        if not failed and cache is not None:
            loaded.prompt_cache.give_back(cache, fed)


def runs_solo(loaded: LoadedModel, vision: VisionInputs | None, max_tokens: int) -> bool:
    """Whether a generation runs on a generator of its own (`_steps`) instead of in its model's
    batch (batching.py): vision models (mlx-vlm's own loop), a model with a draft model or
    kv_bits (speculative.py), a model whose KV cache cannot join a batch, and a request with no
    token to generate."""
    if loaded.model_type is ModelType.VISION or vision is not None or max_tokens < 1:
        return True
    return uses_generation_options(loaded) or not can_batch(loaded)


def _count_draft(loaded: LoadedModel, stats: CompletionStats, drafted: bool) -> None:
    """A token of a speculating generation reached the client: counted for its usage, its
    model's totals and the Server page (drafted or the model's own)."""
    stats.speculative_tokens += 1
    loaded.speculative_tokens += 1
    stats.draft_tokens += drafted
    loaded.draft_tokens += drafted
    engine_counters.drafted_tokens += drafted


async def generate_text(
    loaded: LoadedModel,
    prompt: list[int],
    params: GenerationParams,
    max_tokens: int,
    stats: CompletionStats,
    constraint: GrammarProcessor | None = None,
    vision: VisionInputs | None = None,
) -> AsyncGenerator[GeneratedText, None]:
    """The text of one generation, piece by piece; the last piece carries the finish reason.

    Stop strings never reach the caller, even split across tokens: text that could still
    become one is held back until it cannot. A sharded model's generations take turns (its
    ranks hold one KV cache: mlx_server/distributed/remote_model.py).
    """
    turn = loaded.sharded.turn if loaded.sharded is not None else nullcontext()
    async with turn:
        pieces = _generate_text(loaded, prompt, params, max_tokens, stats, constraint, vision)
        try:
            async for piece in pieces:
                yield piece
        finally:
            await pieces.aclose()


async def _generate_text(
    loaded: LoadedModel,
    prompt: list[int],
    params: GenerationParams,
    max_tokens: int,
    stats: CompletionStats,
    constraint: GrammarProcessor | None,
    vision: VisionInputs | None,
) -> AsyncGenerator[GeneratedText, None]:
    started = time.perf_counter()
    first_token_at: float | None = None
    stop_filter = StopStringFilter(params.stop)
    stats.prompt_tokens = len(prompt)
    steps: AsyncGenerator[TokenStep, None]
    if runs_solo(loaded, vision, max_tokens):
        steps = stream_on_metal_thread(
            lambda: _steps(loaded, prompt, params, max_tokens, constraint, stats, vision)
        )
    else:
        steps = batched_steps(loaded, BatchedSequence(prompt, params, max_tokens, constraint, stats))
    try:
        async for step in steps:
            now = time.perf_counter()
            if first_token_at is None:
                first_token_at = stats.first_token_at = now
                stats.ttft_s = now - started
                engine_counters.prompt_done(len(prompt), stats.cached_prompt_tokens)
            stats.decode_s = now - first_token_at
            if step.finish_reason is None:  # a generated token (the end-of-turn token is not counted)
                stats.completion_tokens += 1
                engine_counters.generated_tokens += 1  # the Server page's charts
                if step.drafted is not None:
                    _count_draft(loaded, stats, step.drafted)
            text = stop_filter.feed(step.text)
            logprobs = [step.logprob] if step.logprob is not None else []
            if stop_filter.stopped:
                stats.finish_reason = "stop"
                stats.stop_sequence = stop_filter.matched
                yield GeneratedText(text, logprobs, "stop")
                return
            if step.finish_reason is not None:
                stats.finish_reason = step.finish_reason
                yield GeneratedText(text + stop_filter.flush(), logprobs, step.finish_reason)
                return
            if text or logprobs:
                yield GeneratedText(text, logprobs)
    finally:
        await steps.aclose()
