"""Reuse of KV caches across requests that share a prompt prefix (seed 000, "prompt cache").

Agents resend the whole conversation every turn, side requests (titles, sub-agents) come with
their own system prompts, and tool definitions make long shared prefixes; prefill is the slow
part on this CPU, so a request should only prefill what no earlier request has seen.

Many entries per loaded model, keyed by the tokens each holds, in mlx-lm's own
`LRUPromptCache` (a token trie with least-recently-used eviction by bytes): a request takes a
copy of the entry with the longest prefix it shares (trimmed to that prefix), extends it while
generating and gives it back under its tokens, which replaces the shorter entries it extends.
The copy is cheap: MLX arrays are values, so a copy shares the entry's buffers until the
request writes its own tokens, which gives the request buffers of its own; an entry in the trie
is never written, so no request can change what another one reads.

The setting MLX_SERVER_PROMPT_CACHE_MB bounds the caches of all loaded models together, as a
user reading "prompt cache: 512 MiB" expects: a model's cache made from the settings joins the
pool's group, and an entry given back past the bound first sheds the caches of the models used
least recently, then the oldest entries of its own.

Everything here runs on the MLX thread, except the figures, which are plain reads.
"""

from __future__ import annotations

import sys
import time
import weakref
from typing import Any

from mlx_lm.models.cache import LRUPromptCache, can_trim_prompt_cache, make_prompt_cache, trim_prompt_cache

from mlx_server.config import get_settings

MiB = 1024**2
# LRUPromptCache keys entries by model first; each loaded model has its own PromptCache.
_KEY = "model"
# The caches of the loaded models (made from the settings), which share the setting's bound.
_pooled: weakref.WeakSet[PromptCache] = weakref.WeakSet()


class PromptCache:
    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._entries = LRUPromptCache(max_size=sys.maxsize, max_bytes=max_bytes)
        self.hits = 0
        self.reused_tokens = 0
        self.last_used = time.monotonic()
        # What the entries were computed with (models/prompt_cache_store.py), set at load:
        # entries are saved to disk, and read back, only under the same fingerprint.
        self.fingerprint: str | None = None

    @classmethod
    def from_settings(cls) -> PromptCache:
        """A loaded model's cache: with every other such cache, bounded by
        MLX_SERVER_PROMPT_CACHE_MB (0 keeps nothing)."""
        cache = cls(get_settings().prompt_cache_mb * MiB)
        _pooled.add(cache)
        return cache

    @property
    def nbytes(self) -> int:
        """Bytes of the KV arrays the entries hold (their allocated buffers, not only the
        tokens in use)."""
        return int(self._entries.nbytes)

    @property
    def entries(self) -> int:
        return len(self._entries)

    def take(self, model: Any, prompt: list[int]) -> tuple[list[Any], int]:
        """A KV cache of the request's own for `prompt`, and how many of its first tokens it
        already holds. At least the last prompt token is left to process: generation starts
        from it."""
        self.last_used = time.monotonic()
        cache, rest = self._entries.fetch_nearest_cache(_KEY, prompt)
        reused = len(prompt) - len(rest)
        if cache is not None and reused == len(prompt):  # the whole prompt was cached
            if can_trim_prompt_cache(cache):
                trim_prompt_cache(cache, 1)
                reused -= 1
            else:
                cache, reused = None, 0
        if cache is None or reused <= 0:
            return make_prompt_cache(model), 0
        self.hits += 1
        self.reused_tokens += reused
        return cache, reused

    def give_back(self, cache: list[Any], tokens: list[int]) -> None:
        """Keep `cache` as an entry; `tokens` are the ones fed so far (prompt, then generated),
        of which the cache holds the first `offset`. The caller must not use `cache` again."""
        held = cache[0].offset if cache else 0
        if not 0 < held <= len(tokens) or self.max_bytes <= 0:
            return
        if sum(c.nbytes for c in cache) > self.max_bytes:
            return  # it would evict everything, itself included
        self._entries.insert_cache(_KEY, tokens[:held], cache)
        if self in _pooled:
            self._keep_group_within_bound()

    def room(self) -> int:
        """Bytes an entry may still take without evicting any (the group's bound if pooled)."""
        group = _pooled if self in _pooled else [self]
        return self.max_bytes - sum(c.nbytes for c in group)

    def restore(self, cache: list[Any], tokens: list[int]) -> bool:
        """Keep an entry read back from disk if it fits in `room()` (it evicts nothing)."""
        size = sum(c.nbytes for c in cache)
        if not tokens or cache[0].offset != len(tokens) or size > self.room():
            return False
        self._entries.insert_cache(_KEY, tokens, cache)
        return True

    def longest_entries(self, min_tokens: int) -> list[tuple[list[int], list[Any]]]:
        """(tokens, KV cache) of the entries holding at least `min_tokens` tokens, most recently
        used first. Reads LRUPromptCache's order and trie (mlx-lm is pinned in pyproject)."""
        order = [tokens for lru in self._entries._lru._lrus.values() for tokens in lru]
        found = []
        for model, tokens in reversed(order):
            if len(tokens) >= min_tokens:
                found.append((list(tokens), self._entries._trie.get(model, tokens).prompt_cache))
        return found

    def _keep_group_within_bound(self) -> None:
        """The pooled caches together at most `max_bytes`: the other models' caches shed first,
        least recently used model first, then this one's oldest entries."""
        others = sorted((c for c in _pooled if c is not self), key=lambda c: c.last_used)
        for cache in [*others, self]:
            excess = sum(c.nbytes for c in _pooled) - self.max_bytes
            if excess <= 0:
                return
            cache.trim_to(max(0, cache.nbytes - excess))

    def trim_to(self, max_bytes: int) -> None:
        """Drop least recently used entries until at most `max_bytes` are held."""
        self._entries.trim_to(n_bytes=max_bytes)

    def clear(self) -> None:
        self._entries.trim_to(n_sequences=0)

    def figures(self) -> dict[str, int]:
        return {
            "hits": self.hits,
            "reused_tokens": self.reused_tokens,
            "entries": self.entries,
            "bytes": self.nbytes,
            "max_bytes": self.max_bytes,
        }
