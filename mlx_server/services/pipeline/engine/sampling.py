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


class TokenSampler:
    """A generation's sampler: one token from a row of logprobs per call (mlx-lm's sampler
    contract), or several rows at once for prompt lookup (`draw_rows`, then `keep`).

    Greedy at temperature 0; else top-p / min-p / top-k filtering and a categorical draw with
    the generation's own key, split once per token. Drawing rows takes the keys the next calls
    would take, in order, so a seeded reply is the same token for token whether its tokens were
    verified in bulk or drawn one by one: `keep(n)` keeps the first n draws, and the rest of the
    keys are drawn again for the tokens that replace the rejected ones.
    """

    def __init__(self, params: SamplingParams) -> None:
        self.greedy = params.temperature == 0
        self._filters: list[Callable[[mx.array], mx.array]] = []
        if 0 < params.top_p < 1.0:
            self._filters.append(lambda x: apply_top_p(x, params.top_p))
        if params.min_p > 0:
            self._filters.append(lambda x: apply_min_p(x, params.min_p, 1))
        if params.top_k > 0:
            self._filters.append(lambda x: _top_k(x, params.top_k))
        self._inverse_temperature = 0.0 if self.greedy else 1.0 / params.temperature
        seed = params.seed if params.seed is not None else secrets.randbits(63)
        self._key = None if self.greedy else mx.random.key(seed)
        self._keys_after: list[mx.array] = []  # after each row of the last `draw_rows`

    def __call__(self, logprobs: mx.array) -> mx.array:
        if self._key is None:
            return mx.argmax(logprobs, axis=-1)
        self._key, draw = mx.random.split(self._key)
        return self._draw(logprobs, draw)

    def _draw(self, logprobs: mx.array, key: mx.array) -> mx.array:
        for apply in self._filters:
            logprobs = apply(logprobs)
        return mx.random.categorical(logprobs * self._inverse_temperature, key=key)

    def draw_rows(self, logprobs: mx.array) -> mx.array:
        """A token for each row of `logprobs` (rows x vocabulary), row i drawn as the i-th next
        call would; until `keep`, the generation's key has not moved."""
        if self._key is None:
            return mx.argmax(logprobs, axis=-1)
        key, tokens, self._keys_after = self._key, [], []
        for row in range(logprobs.shape[0]):
            key, draw = mx.random.split(key)
            tokens.append(self._draw(logprobs[row : row + 1], draw))
            self._keys_after.append(key)
        return mx.concatenate(tokens)

    def keep(self, rows: int) -> None:
        """The first `rows` tokens of the last `draw_rows` are used: the key moves past them."""
        if self._key is not None and rows > 0:
            self._key = self._keys_after[rows - 1]


def make_sampler(params: SamplingParams) -> TokenSampler:
    return TokenSampler(params)


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
) -> tuple[TokenSampler, list[LogitsProcessor]]:
    """A generation's sampler and logits processors (penalties, biases, then its grammar)."""
    # The grammar goes last: penalties and biases must not revive a token it ruled out.
    processors = make_processors(params) + ([constraint] if constraint is not None else [])
    return make_sampler(params), processors
