"""A sharded model as the server's request pipeline sees it: a model whose forward runs in its group.

`RemoteModel` is what `LoadedModel.model` holds for a sharded model. Called like an mlx-lm model,
`model(tokens, cache=cache)`, it sends (cache offset, tokens) to rank 0 (link.py) and returns
the group's logits; its cache (`make_cache`) is one `RemoteCache` whose `offset` and `trim` stand
for the KV caches on the ranks (each rank trims to the offset it is sent). So mlx-lm's
`generate_step` runs on it unchanged, with our sampler, logits processors, grammars, stop
strings and logprobs: nothing in the pipeline has a sharded branch. Its cache cannot join a
continuous batch (no `merge`), so the model runs on the solo path, one request at a time
(`ShardedGroup.turn`), and `SinglePromptCache` reuses the prefix the group's cache still holds
from the previous request.

Only the last row's logits cross the socket for a prompt chunk (mlx-lm's prefill discards
them); a block of up to VERIFY_ROWS tokens (a speculative verify pass) gets all its rows.
"""

from __future__ import annotations

from typing import Any

import mlx.core as mx

from mlx_server.distributed.link import Rank0Link
from mlx_server.models.prompt_cache import PromptCache

VERIFY_ROWS = 16


class RemoteCache:
    """The group's KV cache, as far as the server needs to know it: how many tokens it holds."""

    def __init__(self, offset: int = 0) -> None:
        self.offset = offset

    @property
    def state(self) -> list[Any]:
        return []  # nothing here to evaluate: the ranks evaluate theirs before they answer

    @property
    def nbytes(self) -> int:
        return 0  # on the ranks (accounted in the model's size)

    def is_trimmable(self) -> bool:
        return True

    def trim(self, n: int) -> int:
        n = min(self.offset, n)
        self.offset -= n
        return n

    def empty(self) -> bool:
        return self.offset == 0


class RemoteModel:
    def __init__(self, link: Rank0Link, config: dict[str, Any], activation_bytes: int) -> None:
        self.link = link
        self.config = config
        self.activation_bytes = activation_bytes

    def parameters(self) -> dict[str, mx.array]:
        """No weights here (they are on the ranks): one empty array of the ranks' activation
        type, which is what the probe reads from a model's parameters (KV bytes per token)."""
        return {"activations": mx.zeros((0,), dtype=mx.float32 if self.activation_bytes >= 4 else mx.float16)}

    def make_cache(self) -> list[Any]:
        return [RemoteCache()]

    def __call__(self, inputs: mx.array, cache: list[Any] | None = None, **_: Any) -> mx.array:
        if cache is None:
            cache = self.make_cache()
        tokens: list[int] = inputs.reshape(-1).tolist()  # type: ignore[assignment]
        rows = len(tokens) if len(tokens) <= VERIFY_ROWS else 1
        logits = self.link.forward(cache[0].offset, tokens, rows)
        cache[0].offset += len(tokens)
        return mx.array(logits)[None]


class SinglePromptCache(PromptCache):
    """A sharded model's prompt cache: the one KV cache its ranks hold, reused up to the prefix
    the next prompt shares with what it holds (the ranks trim the rest)."""

    def __init__(self) -> None:
        super().__init__(0)
        self._held: list[int] = []

    def take(self, model: Any, prompt: list[int]) -> tuple[list[Any], int]:
        shared = 0
        for held, wanted in zip(self._held, prompt[:-1], strict=False):
            if held != wanted:
                break
            shared += 1
        self._held = []  # in use: a generation that fails leaves nothing known to reuse
        if shared:
            self.hits += 1
            self.reused_tokens += shared
        return [RemoteCache(shared)], shared

    def give_back(self, cache: list[Any], tokens: list[int]) -> None:
        held = cache[0].offset if cache else 0
        self._held = list(tokens[:held]) if held <= len(tokens) else []
