"""The per-model generation options on the solo token path: speculative decoding with a draft
model, and a quantized KV cache (seed 000; records.ModelRecord holds the options).

Speculative decoding runs mlx-lm's `speculative_generate_step`: the draft proposes
`MLX_SERVER_NUM_DRAFT_TOKENS` tokens, the target checks them in one forward pass and keeps the
ones it would have chosen itself, so at temperature 0 the output is the target's own greedy
output. Each token says whether the draft proposed it (counted where the token reaches the client,
generation.py); the share is the acceptance rate.

KV quantization passes `kv_bits` to mlx-lm (`kv_quantization`, for generation.py's solo
`generate_step` and for `speculative_generate_step`), which turns each layer's cache into a
`QuantizedKVCache` once it holds `MLX_SERVER_QUANTIZED_KV_START` tokens. Either option keeps
the model's requests out of the continuous batch (`uses_generation_options`).

The prompt cache (models/prompt_cache.py) and these options:
- A model with a draft keeps the target's and the draft's caches as one list (target layers
  first, as `speculative_generate_step` takes them), so an entry restores both; they are
  aligned to the same length before the list goes back.
- A quantized cache is trimmable and copies like any other, so kv_bits alone keeps the prompt
  cache (mlx-lm replaces the list's items in place when it quantizes).
- kv_bits with a draft cannot keep it: `speculative_generate_step` quantizes the slices it cut
  from the list, so the list we hold keeps the layers' unquantized caches from before
  quantization, stale and un-rewound. That combination runs on a fresh cache, never given back.
- A grammar (constrained decoding) advances its matcher on every token it sees, including draft
  tokens the target then rejects: a constrained request asks the draft for no tokens (the target
  decodes alone, one token per step, its grammar seeing each token once), so its cache entries
  keep both models' layers too (the draft's trimmed to what it saw).
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import mlx.core as mx
from mlx_lm.generate import speculative_generate_step
from mlx_lm.models.cache import make_prompt_cache, trim_prompt_cache

from mlx_server.config import get_settings
from mlx_server.models.loaders import LoadedModel
from mlx_server.services.pipeline.engine.constraints import GrammarProcessor
from mlx_server.services.pipeline.engine.sampling import LogitsProcessor, Sampler

# (token, logprobs, drafted): drafted None where the generation does not speculate.
Tokens = Generator[tuple[int, mx.array, bool | None], None, None]


def uses_generation_options(loaded: LoadedModel) -> bool:
    """Whether the model's requests run on the solo path (generation.py's `runs_solo`): a draft
    or a quantized cache does not join a continuous batch."""
    return loaded.draft_model is not None or loaded.kv_bits is not None


class _TargetAndDraft:
    """What the prompt cache builds a fresh cache from: the target's layers, then the draft's."""

    def __init__(self, model: Any, draft: Any) -> None:
        self.model, self.draft = model, draft

    def make_cache(self) -> list[Any]:
        caches: list[Any] = make_prompt_cache(self.model) + make_prompt_cache(self.draft)
        return caches


def _align(cache: list[Any], target_layers: int) -> None:
    """Trim the longer of the target's and the draft's caches to the other's length: after a
    fully accepted round the draft has not yet seen the last token it proposed."""
    target, draft = cache[:target_layers], cache[target_layers:]
    if not target or not draft:
        return
    excess = target[0].offset - draft[0].offset
    if excess > 0:
        trim_prompt_cache(target, excess)
    elif excess < 0:
        trim_prompt_cache(draft, -excess)


Steps = Generator[tuple[int, mx.array, bool], None, None]


def _drafted(steps: Steps, loaded: LoadedModel, cache: list[Any] | None) -> Tokens:
    """The tokens; the target's and the draft's caches aligned once they end."""
    try:
        yield from steps
    finally:
        steps.close()  # mlx-lm rewinds the rejected draft tokens here
        if cache is not None:
            _align(cache, len(loaded.model.layers))


def _undrafted(steps: Steps, loaded: LoadedModel, cache: list[Any] | None) -> Tokens:
    """A constrained request's tokens: the draft was asked for none, nothing was speculated."""
    tokens = _drafted(steps, loaded, cache)
    try:
        for token, logprobs, _ in tokens:
            yield token, logprobs, None
    finally:
        tokens.close()


def drafts_for(loaded: LoadedModel) -> bool:
    """Whether the model's text requests run here: it has a draft model."""
    return loaded.draft_model is not None


def kv_quantization(loaded: LoadedModel) -> dict[str, Any]:
    """mlx-lm's KV cache quantization arguments for the model (kv_bits None: none)."""
    return {
        "kv_bits": loaded.kv_bits,
        "kv_group_size": loaded.kv_group_size,
        "quantized_kv_start": get_settings().quantized_kv_start,
    }


def speculative_token_stream(
    loaded: LoadedModel,
    prompt: list[int],
    max_tokens: int,
    sampler: Sampler,
    processors: list[LogitsProcessor],
) -> tuple[Tokens, list[Any] | None, int]:
    """(token, logprobs, drafted) from the model checking its draft's tokens (drafted None for a
    constrained request, which asks the draft for none), the cache to give back to the prompt
    cache (None: not to be kept) and the prompt tokens it reused."""
    constrained = any(isinstance(p, GrammarProcessor) for p in processors)
    pair = _TargetAndDraft(loaded.model, loaded.draft_model)
    kept: list[Any] | None
    if loaded.kv_bits is None:
        kept, reused = loaded.prompt_cache.take(pair, prompt)
        cache = kept
    else:  # see the module docstring: this combination cannot keep its cache
        kept, cache, reused = None, pair.make_cache(), 0
    steps = speculative_generate_step(
        mx.array(prompt[reused:]),
        loaded.model,
        loaded.draft_model,
        num_draft_tokens=0 if constrained else get_settings().num_draft_tokens,
        max_tokens=max_tokens,
        sampler=sampler,
        logits_processors=processors or None,
        prompt_cache=cache,
        **kv_quantization(loaded),
    )
    return (_undrafted if constrained else _drafted)(steps, loaded, kept), kept, reused
