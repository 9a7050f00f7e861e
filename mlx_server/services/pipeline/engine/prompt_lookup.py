"""Prompt-lookup speculative decoding: drafts copied from the text so far, no draft model.

Agents make a model re-emit its context: a file returned with one function renamed, a diff, a
JSON tool result quoted back. After each token, `NgramDrafts` looks for the last few tokens
(4, then 3, then 2) earlier in the prompt and the reply (and in the text the request predicted,
OpenAI's `prediction`), and proposes the tokens that followed
their latest occurrence. `verify` feeds the pending token and the proposal in one forward pass
(on the 2-core CPU, SmolLM2-135M: 1 token 112 ms, 5 tokens ~165 ms, 9 tokens ~220 ms), samples
every position with the generation's own sampler and logits processors, and keeps the proposed
tokens up to the first one the model would not have produced itself, plus the model's own
token at that position. What the client receives is therefore exactly what decoding one token
at a time gives: greedy text identical, a seeded sample identical (the sampler's keys are
taken in order, sampling.py), logprobs those of the model at each position.

A proposal that fails costs the extra positions of the pass; the width adapts (doubled after a
fully accepted proposal, down to what was accepted plus one after a partial one) and a run of
proposals with nothing accepted pauses the lookup for 1, 2, 4 ... 16 tokens, so free writing,
where matches are chance, runs at the speed of plain decoding. A constrained request (grammar)
does not speculate: its matcher advances on every token it is shown.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import mlx.core as mx
from mlx_lm.models.cache import trim_prompt_cache

from mlx_server.services.pipeline.engine.sampling import TokenSampler

LONGEST_NGRAM = 4
SHORTEST_NGRAM = 2
MAX_PAUSE = 16


class NgramDrafts:
    """The tokens of one generation (prompt, then each token as it is decided) and the drafts
    they suggest.

    Where each n-gram last occurred is kept in an index, updated as tokens arrive: a proposal
    is a few dictionary look-ups, not a scan of the whole text (a scan cost ~0.5 ms a token on
    the 2-core CPU with a short prompt, and grows with it, on the MLX thread between two steps).
    """

    def __init__(self, tokens: list[int], most: int, prediction: list[int] | None = None) -> None:
        # The tokens searched: a predicted reply (OpenAI's `prediction`), then the prompt, then
        # each token decided; the last n-gram is always the generation's own.
        self.tokens: list[int] = []
        # Per n: an n-gram -> where the token after its latest occurrence is.
        self._after: dict[int, dict[tuple[int, ...], int]] = {
            n: {} for n in range(SHORTEST_NGRAM, LONGEST_NGRAM + 1)
        }
        self.most = most  # the setting: at most this many tokens per proposal
        self.width = most  # the current width, adapted to how the last proposals fared
        self._pause = 0  # tokens to decode without looking
        self._misses = 0  # proposals in a row with nothing accepted
        self.extend([*(prediction or ()), *tokens])

    def extend(self, tokens: list[int]) -> None:
        history = self.tokens
        for token in tokens:
            position = len(history)  # the n-grams that end just before it are followed by it
            for n, after in self._after.items():
                if position >= n:
                    after[tuple(history[position - n : position])] = position
            history.append(token)

    def _match(self) -> int | None:
        """Where the tokens that followed the latest earlier occurrence of the text's last n-gram
        (longest first) begin; None where nothing matches."""
        history = self.tokens
        for n in range(LONGEST_NGRAM, SHORTEST_NGRAM - 1, -1):
            start = self._after[n].get(tuple(history[-n:])) if len(history) > n else None
            if start is not None:
                return start
        return None

    def propose(self, room: int) -> list[int]:
        """Up to `room` tokens that followed the latest earlier occurrence of the text's last
        n-gram (longest first); none where nothing matches. Asked only after `may_propose`
        said yes for this token (which counts the pauses)."""
        width = min(self.width, room)
        start = self._match() if width >= 1 else None
        return [] if start is None else self.tokens[start : start + width]

    def may_propose(self) -> bool:
        """Whether the next token should be read before the pass after it is queued: the text so
        far (without the token being computed) ends in an n-gram seen before, so the text with it
        likely does too. No while paused (a token of the pause is counted) or where nothing
        matches: then the next pass is queued first and the lookup resumes a token later, which
        keeps free writing at the speed of plain decoding (the pass is built while the previous
        one runs, as mlx-lm's `generate_step` does)."""
        if self._pause > 0:
            self._pause -= 1
            return False
        return self._match() is not None

    def record(self, proposed: int, accepted: int) -> None:
        """How a proposal fared: the width and the pause for the next ones."""
        if accepted == proposed:
            self.width = min(self.most, self.width * 2)
        else:
            self.width = max(1, accepted + 1)
        if accepted == 0:
            self._misses += 1
            self._pause = min(MAX_PAUSE, 1 << (self._misses - 1))
        else:
            self._misses = 0


@dataclass(frozen=True)
class Verified:
    """The outcome of a pass over the pending token and a proposal: the tokens decided (the
    accepted drafts, then the model's own token at the first disagreement or after the last
    draft) and each one's logprobs."""

    tokens: list[int]
    logprobs: list[mx.array]
    accepted: int  # how many of the tokens were drafts


def verify(
    model: Any,
    cache: list[Any],
    pending: int,
    drafts: list[int],
    sampler: TokenSampler,
    processors: Any | None,
    history: list[int],
) -> Verified:
    """Feed `pending` and `drafts` to `model` in one pass and decide the next tokens.

    `history` is every token before `pending` (what the logits processors see, with the ones
    fed); the cache is left holding `pending` and the accepted drafts."""
    fed = [pending, *drafts]
    logits = model(mx.array(fed)[None], cache=cache)[0]
    logprobs = position_logprobs(logits, [processors] if processors is not None else [], history, fed)
    sampled = sampler.draw_rows(logprobs)
    mx.eval(sampled, logprobs)
    tokens: list[int] = sampled.tolist()  # type: ignore[assignment]  # a 1-d array
    accepted = accepted_drafts(tokens, drafts)
    sampler.keep(accepted + 1)
    trim_prompt_cache(cache, len(drafts) - accepted)
    return Verified(tokens[: accepted + 1], [logprobs[i] for i in range(accepted + 1)], accepted)


def position_logprobs(
    logits: mx.array, processors: Sequence[Any], history: list[int], fed: list[int]
) -> mx.array:
    """The logprobs of each position of a pass over `fed` (positions x vocabulary), the logits
    processors run first at each with the tokens before it (`history`, then `fed` up to it)."""
    if processors:
        seen, known = [*history, *fed], len(history)
        rows = []
        for i in range(logits.shape[0]):
            row = logits[i : i + 1]
            for processor in processors:
                row = processor(mx.array(seen[: known + i + 1]), row)
            rows.append(row)
        logits = mx.concatenate(rows)
    return logits - mx.logsumexp(logits, axis=-1, keepdims=True)


def accepted_drafts(drawn: list[int], drafts: list[int]) -> int:
    """How many of `drafts`, from the first, are the tokens drawn at their positions."""
    accepted = 0
    while accepted < len(drafts) and drawn[accepted] == drafts[accepted]:
        accepted += 1
    return accepted
