"""What an upstream reply has produced so far: the request's stats (tokens, TTFT, decode time)
and whether a token has reached the client, which decides what a failure means."""

from __future__ import annotations

import time

from mlx_server.services.pipeline.engine.params import CompletionStats
from mlx_server.services.pipeline.events import Usage


class UpstreamError(Exception):
    """The upstream failed (unreachable, timed out, a 5xx, a broken or cut stream)."""


class UpstreamProgress:
    def __init__(self, backend: str, stats: CompletionStats) -> None:
        self.backend = backend
        self.stats = stats
        self.started = time.perf_counter()
        self.tokens = 0  # streamed pieces, the completion count when the upstream gives none
        self._reported_completion: int | None = None

    @property
    def started_reply(self) -> bool:
        return self.stats.first_token_at is not None

    def token(self) -> None:
        now = time.perf_counter()
        stats = self.stats
        if stats.first_token_at is None:
            stats.first_token_at = now
            stats.ttft_s = now - self.started
        stats.decode_s = now - stats.first_token_at
        self.tokens += 1
        stats.completion_tokens = self._reported_completion or self.tokens

    def usage(self, prompt_tokens: int | None, completion_tokens: int | None) -> None:
        if prompt_tokens:
            self.stats.prompt_tokens = prompt_tokens
        if completion_tokens is not None:
            self._reported_completion = self.stats.completion_tokens = int(completion_tokens)

    def final_usage(self) -> Usage:
        return self.stats.usage()

    def upstream_error(self, what: str) -> UpstreamError:
        return UpstreamError(f"backend {self.backend!r}: {what}")
