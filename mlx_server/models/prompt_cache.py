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

An entry evicted from memory (past the bound, shed for a load, or at unload) goes to the
model's disk tier when it has one (`spill`, models/prompt_cache_store.py), and a request whose
prompt an entry on disk covers better than any in memory reads it back.

Everything here runs on the MLX thread, except the figures, which are plain reads.
"""

from __future__ import annotations

import sys
import time
import weakref
from typing import Any, Protocol

from mlx_lm.models.cache import LRUPromptCache, can_trim_prompt_cache, make_prompt_cache, trim_prompt_cache

from mlx_server.config import get_settings

MiB = 1024**2
# LRUPromptCache keys entries by model first; each loaded model has its own PromptCache.
_KEY = "model"
# The entries' kind in LRUPromptCache's order (all ours are one kind, so its order is plain LRU).
_KIND = "assistant"
# The caches of the loaded models (made from the settings), which share the setting's bound.
_pooled: weakref.WeakSet[PromptCache] = weakref.WeakSet()


class Spill(Protocol):
    """A model's disk tier: where evicted entries go and longer prefixes come back from."""

    def put(self, tokens: list[int], cache: list[Any]) -> None:
        """Keep an entry leaving memory (the caller drops it after)."""

    def fetch(self, prompt: list[int], better_than: int) -> tuple[list[int], list[Any]] | None:
        """An entry (its tokens and KV cache) covering more than `better_than` tokens of
        `prompt`, read back; None when no entry would gain enough."""


class PromptCache:
    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        # Unbounded inside: this class evicts, so that each evicted entry can go to `spill`.
        self._entries = LRUPromptCache(max_size=sys.maxsize, max_bytes=sys.maxsize)
        self.hits = 0
        self.reused_tokens = 0
        self.disk_hits = 0
        self.last_used = time.monotonic()
        # The disk tier (models/prompt_cache_store.py), attached at load with the fingerprint of
        # what the entries were computed with; None keeps the entries in memory only.
        self.spill: Spill | None = None
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
        if self.spill is not None and self.max_bytes > 0:
            found = self.spill.fetch(prompt, len(prompt) - len(rest))
            if found is not None:
                self.disk_hits += 1
                cache, rest = self._from_disk(prompt, *found)
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

    def _from_disk(self, prompt: list[int], tokens: list[int], cache: list[Any]) -> tuple[Any, list[int]]:
        """An entry read back from disk: kept as an entry again when it fits, then taken like
        any other; one larger than the bound is the request's own, trimmed to the shared prefix."""
        if sum(c.nbytes for c in cache) <= self.max_bytes:
            self._entries.insert_cache(_KEY, tokens, cache)
            self._within_bound()
            cached, rest = self._entries.fetch_nearest_cache(_KEY, prompt)
            return cached, rest
        shared = next((i for i, (a, b) in enumerate(zip(tokens, prompt, strict=False)) if a != b), None)
        keep = min(len(tokens), len(prompt)) if shared is None else shared
        trim_prompt_cache(cache, len(tokens) - keep)
        return cache, prompt[keep:]

    def give_back(self, cache: list[Any], tokens: list[int]) -> None:
        """Keep `cache` as an entry; `tokens` are the ones fed so far (prompt, then generated),
        of which the cache holds the first `offset`. The caller must not use `cache` again."""
        held = cache[0].offset if cache else 0
        if not 0 < held <= len(tokens) or self.max_bytes <= 0:
            return
        if sum(c.nbytes for c in cache) > self.max_bytes:
            # It would evict everything, itself included: straight to the disk tier, if any.
            if self.spill is not None:
                self.spill.put(tokens[:held], cache)
            return
        self._entries.insert_cache(_KEY, tokens[:held], cache)
        self._within_bound()

    def _within_bound(self) -> None:
        if self in _pooled:
            self._keep_group_within_bound()
        else:
            self.trim_to(self.max_bytes)

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
        """Evict least recently used entries (to the disk tier, if any) until at most
        `max_bytes` are held."""
        while self.entries and self.nbytes > max_bytes:
            self._evict_oldest()

    def clear(self) -> None:
        """Evict every entry (at unload): to the disk tier, if any."""
        self.trim_to(-1)

    def _evict_oldest(self) -> None:
        # The entry LRUPromptCache would pop first (every entry is of one kind, so its order is
        # plain LRU); read before it goes, then dropped with its own bookkeeping. mlx-lm is
        # pinned in pyproject.
        model, tokens = self._entries._lru._lrus[_KIND][0]
        evicted = self._entries._trie.get(model, tokens).prompt_cache
        self._entries.trim_to(n_sequences=len(self._entries) - 1)
        if self.spill is not None:
            self.spill.put(list(tokens), evicted)

    def figures(self) -> dict[str, int]:
        return {
            "hits": self.hits,
            "reused_tokens": self.reused_tokens,
            "disk_hits": self.disk_hits,
            "entries": self.entries,
            "bytes": self.nbytes,
            "max_bytes": self.max_bytes,
        }
