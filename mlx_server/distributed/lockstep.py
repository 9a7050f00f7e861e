"""The forward passes every rank of a sharded model runs in lockstep (inside the rank workers).

Rank 0 decides and the others follow: before each forward pass rank 0 shares the command (its
header: what, the cache offset, how many tokens, how many logit rows; then the tokens) with an
`all_sum` in which the other ranks contribute zeros, as mlx-lm's distributed server shares its
requests. Every rank then trims its KV cache to the offset and runs the same forward on its
shard, whose own collectives (tensor parallel's sums, the pipeline's sends) pair up because
every rank evaluates the same graphs in the same order: each forward is evaluated before the
next command is shared.

There is no token loop on the ranks: sampling, grammars, stop strings and every protocol stay
in the server, which asks for one forward at a time (remote_model.py). A request that ends,
is cancelled or whose client went away simply sends no further command.
"""

from __future__ import annotations

from enum import IntEnum
from typing import Any

import mlx.core as mx
from mlx_lm.models.cache import make_prompt_cache, trim_prompt_cache


class Command(IntEnum):
    FORWARD = 1  # offset, token count, logit rows; the tokens follow in a second collective
    SHUTDOWN = 2


class CommandRefused(ValueError):
    """Rank 0 refused a command before sharing it (the group is unaffected)."""


class Lockstep:
    """One rank's side: rank 0 calls `forward`/`shutdown`, the others call `follow()`."""

    def __init__(self, model: Any, group: Any) -> None:
        self.model = model
        self.group = group
        self.rank = int(group.rank())
        self.cache: list[Any] = make_prompt_cache(model)

    @property
    def held(self) -> int:
        """How many tokens the KV cache holds."""
        return int(self.cache[0].offset) if self.cache else 0

    def _share(self, values: list[int], size: int) -> list[int]:
        """Rank 0's `values` on every rank (the others pass `size` zeros)."""
        data = mx.array(values, dtype=mx.int32) if self.rank == 0 else mx.zeros((size,), dtype=mx.int32)
        shared: list[int] = mx.distributed.all_sum(data, group=self.group, stream=mx.cpu).tolist()  # type: ignore[assignment]
        return shared

    def _run(self, offset: int, tokens: list[int], rows: int) -> mx.array:
        """What every rank does for one command: the cache back to `offset`, then the forward."""
        if offset == 0:
            self.cache = make_prompt_cache(self.model)  # a new conversation: the old one's memory goes
        elif offset < self.held:
            trim_prompt_cache(self.cache, self.held - offset)
        output: mx.array = self.model(mx.array(tokens, dtype=mx.int32)[None], cache=self.cache)
        logits = output[0, -rows:, :].astype(mx.float32)
        mx.eval(logits)
        return logits

    # --- Rank 0 ---

    def forward(self, offset: int, tokens: list[int], rows: int) -> mx.array:
        """The logits of the last `rows` positions of `tokens` fed after the first `offset`
        tokens of the cache, computed by the whole group."""
        if not tokens or not 1 <= rows <= len(tokens):
            raise CommandRefused(f"{len(tokens)} tokens and {rows} rows make no forward pass")
        if not 0 <= offset <= self.held:
            raise CommandRefused(f"the cache holds {self.held} tokens; it cannot start from {offset}")
        self._share([int(Command.FORWARD), offset, len(tokens), rows], 4)
        self._share(tokens, len(tokens))
        return self._run(offset, tokens, rows)

    def shutdown(self) -> None:
        self._share([int(Command.SHUTDOWN), 0, 0, 0], 4)

    # --- Ranks 1..N-1 ---

    def follow(self) -> None:
        """Follow rank 0's commands until it shuts the group down."""
        while True:
            command, offset, count, rows = self._share([], 4)
            if command == Command.SHUTDOWN:
                return
            if command != Command.FORWARD:
                raise RuntimeError(f"rank 0 sent an unknown command {command}")
            self._run(offset, self._share([], count), rows)
