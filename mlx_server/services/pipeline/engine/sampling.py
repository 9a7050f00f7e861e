"""Sampling parameters → mlx-lm sampler and logits processors (`sampling_for`: the one place a
generation's are built, for the batch and the solo loops alike).

Sampled requests draw from their own PRNG key (split per token) instead of MLX's global
state: generations interleave on the MLX thread token by token, so a global seed would be
consumed by whichever request runs next and `seed` would not reproduce.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from typing import TYPE_CHECKING

import mlx.core as mx
from mlx_lm.sample_utils import apply_min_p, apply_top_k, apply_top_p, make_logits_processors

from mlx_server.services.pipeline.engine.params import SamplingParams

if TYPE_CHECKING:
    from mlx_server.services.pipeline.engine.constraints import GrammarProcessor

Sampler = Callable[[mx.array], mx.array]
LogitsProcessor = Callable[[mx.array, mx.array], mx.array]


def make_sampler(params: SamplingParams) -> Sampler:
    """Greedy at temperature 0, else top-p / min-p / top-k filtering and a keyed categorical draw."""
    if params.temperature == 0:
        return lambda logprobs: mx.argmax(logprobs, axis=-1)
    filters: list[Callable[[mx.array], mx.array]] = []
    if 0 < params.top_p < 1.0:
        filters.append(lambda x: apply_top_p(x, params.top_p))
    if params.min_p > 0:
        filters.append(lambda x: apply_min_p(x, params.min_p, 1))
    if params.top_k > 0:
        filters.append(lambda x: _top_k(x, params.top_k))
    key = mx.random.key(params.seed if params.seed is not None else secrets.randbits(63))
    inverse_temperature = 1.0 / params.temperature

    def sample(logprobs: mx.array) -> mx.array:
        nonlocal key
        key, draw = mx.random.split(key)
        for apply in filters:
            logprobs = apply(logprobs)
        return mx.random.categorical(logprobs * inverse_temperature, key=draw)

    return sample


def _top_k(logprobs: mx.array, top_k: int) -> mx.array:
    """The `top_k` most likely tokens; every one when `top_k` reaches the vocabulary. mlx-lm's
    `apply_top_k` raises there, inside `mx.compile`, which leaves the thread's random key a
    tracer (see utils/metal.py: `heal_random_key`)."""
    return logprobs if top_k >= logprobs.shape[-1] else apply_top_k(logprobs, top_k)


def make_processors(params: SamplingParams) -> list[LogitsProcessor]:
    processors: list[LogitsProcessor] = make_logits_processors(
        logit_bias=params.logit_bias,
        repetition_penalty=params.repetition_penalty,
        presence_penalty=params.presence_penalty or None,
        frequency_penalty=params.frequency_penalty or None,
    )
    return processors


def sampling_for(
    params: SamplingParams, constraint: GrammarProcessor | None = None
) -> tuple[Sampler, list[LogitsProcessor]]:
    """A generation's sampler and logits processors (penalties, biases, then its grammar)."""
    # The grammar goes last: penalties and biases must not revive a token it ruled out.
    processors = make_processors(params) + ([constraint] if constraint is not None else [])
    return make_sampler(params), processors
