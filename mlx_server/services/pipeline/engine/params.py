"""The engine's parameter and figure types: what to generate (GenerationParams, SamplingParams),
what it produced (GeneratedText) and how it went (CompletionStats). A leaf: no MLX, no other
pipeline module but the events, so a request type, the protocols and the remote backends can
use them without importing the engine.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from mlx_server.services.pipeline.events import (
    FinishReason,
    GenerationEvent,
    Notice,
    TokenLogprob,
    ToolCallRejected,
    Usage,
)


@dataclass(frozen=True)
class SamplingParams:
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    min_p: float = 0.0
    repetition_penalty: float | None = None
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    logit_bias: dict[int, float] | None = None
    seed: int | None = None


@dataclass(frozen=True)
class GenerationParams:
    """What to generate, independent of the protocol that asked."""

    max_tokens: int | None = None
    stop: list[str] = field(default_factory=list)
    sampling: SamplingParams = field(default_factory=SamplingParams)
    # None: no logprobs; N: the chosen token's logprob plus the N most likely alternatives.
    top_logprobs: int | None = None
    # A continuation of the prompt text (legacy completions) keeps a leading space; a chat reply
    # starts a new turn and does not.
    continuation: bool = False
    # max_tokens as an upper bound (Anthropic clients must send one and send their cloud
    # model's maximum): beyond the context it is lowered to what fits instead of rejected.
    max_tokens_is_ceiling: bool = False
    # Prompt lookup (engine/prompt_lookup.py): at most this many drafted tokens per step, 0 off;
    # None: the model's default, else the server's (MLX_SERVER_PROMPT_LOOKUP_TOKENS).
    prompt_lookup: int | None = None
    # Text the reply is expected to repeat (OpenAI's `prediction`): a source of drafts too.
    prediction: str | None = None
    # The sampling fields (SamplingParams names) the client left out, which the model's defaults
    # fill (pipeline/model_defaults.py); empty for callers that set their own (probe, benchmarks).
    defaultable: frozenset[str] = frozenset()


@dataclass
class CompletionStats:
    """Figures of one generation, filled in as it runs (audit log, UI stats)."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    # perf_counter() when the first token arrived, and the time from the start of generation.
    first_token_at: float | None = None
    ttft_s: float | None = None
    decode_s: float = 0.0
    finish_reason: str | None = None
    # The stop string that ended the generation, if one did.
    stop_sequence: str | None = None
    # Prompt tokens whose KV state came from the prompt cache instead of a prefill.
    cached_prompt_tokens: int = 0
    # Speculative decoding (speculative.py): tokens generated with a draft model, and how many
    # of them the draft proposed.
    speculative_tokens: int = 0
    draft_tokens: int = 0
    # The remote backend that generated (services/remote); None when a local model did.
    backend: str | None = None
    # Why tool calls the model wrote were rejected, and the reply's notices (the audit row's
    # warnings; a non-streamed reply's x-tool-calls-rejected header).
    rejected_calls: list[str] = field(default_factory=list)
    notices: list[str] = field(default_factory=list)

    def note(self, event: GenerationEvent) -> None:
        """Keep what the audit row needs of an event (rejected calls, notices)."""
        if isinstance(event, ToolCallRejected):
            self.rejected_calls.append(event.reason)
        elif isinstance(event, Notice):
            self.notices.append(event.message)

    @property
    def draft_acceptance_rate(self) -> float | None:
        return self.draft_tokens / self.speculative_tokens if self.speculative_tokens else None

    @property
    def decode_tokens_per_s(self) -> float | None:
        steps = self.completion_tokens - 1
        return steps / self.decode_s if steps > 0 and self.decode_s > 0 else None

    def trace_figures(self) -> dict[str, int | float | str]:
        """The generation span's attributes (observability.py)."""
        figures: dict[str, int | float | str] = {
            "gen_ai.usage.input_tokens": self.prompt_tokens,
            "gen_ai.usage.output_tokens": self.completion_tokens,
            "cached_prompt_tokens": self.cached_prompt_tokens,
            "finish_reason": self.finish_reason or "",
        }
        if self.ttft_s is not None:
            figures["ttft_ms"] = self.ttft_s * 1000
        return figures

    def usage(self) -> Usage:
        return Usage(
            prompt_tokens=self.prompt_tokens,
            completion_tokens=self.completion_tokens,
            cached_prompt_tokens=self.cached_prompt_tokens,
            ttft_s=self.ttft_s,
            decode_tokens_per_s=self.decode_tokens_per_s,
            draft_tokens=self.draft_tokens if self.speculative_tokens else None,
            draft_acceptance_rate=self.draft_acceptance_rate,
        )


@dataclass(frozen=True)
class GeneratedText:
    """Text the token loop produced (stop strings already held back); the last one carries the
    finish reason."""

    text: str
    logprobs: list[TokenLogprob] = field(default_factory=list)
    finish_reason: FinishReason | None = None
