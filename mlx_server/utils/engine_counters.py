"""Running totals of the engine's work since the process started, for the Server page's charts.

The token loop (`generate_text`, every local generation of any protocol) adds to them on the
event loop: one integer addition per generated token and one call per prompt, nothing else on
the per-token path. The sampler (services/operations/engine_samples.py) reads them every few
seconds and keeps the differences; they are never reset, so any number of readers can diff them.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class EngineCounters:
    generated_tokens: int = 0  # tokens decoded
    drafted_tokens: int = 0  # of which a draft proposed (prompt lookup or a draft model)
    prompts: int = 0  # generations that reached their first token
    prompt_tokens: int = 0  # the prompt tokens of those generations
    cached_prompt_tokens: int = 0  # of which the prompt cache held the KV state (not prefilled)

    def prompt_done(self, tokens: int, cached: int) -> None:
        """A generation's prompt is in (its first token came): `cached` of its `tokens` came from
        the prompt cache, the rest were prefilled."""
        self.prompts += 1
        self.prompt_tokens += tokens
        self.cached_prompt_tokens += cached


engine_counters = EngineCounters()
