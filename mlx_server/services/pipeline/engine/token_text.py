"""From sampled token ids to text pieces: the one token decoder every loop uses (the batch, a
sequence alone, the solo generator in generation.py).

A sampled token becomes a `TokenStep` here and nowhere else: the model's end-of-turn tokens end
the generation ("stop", no text of their own), every other token adds its text (and its logprob
on request), and the token that uses up the budget is followed by a "length" finish.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import mlx.core as mx
from mlx_lm.tokenizer_utils import BPEStreamingDetokenizer, SPMStreamingDetokenizer

from mlx_server.models.loaders import LoadedModel
from mlx_server.services.pipeline.engine.params import GenerationParams
from mlx_server.services.pipeline.events import FinishReason, TokenLogprob


@dataclass(frozen=True)
class TokenStep:
    """One token's text (or the finish, whose text is what the detokenizer still held)."""

    text: str
    logprob: TokenLogprob | None
    finish_reason: FinishReason | None
    # Speculative decoding: whether a draft proposed the token (prompt lookup or a draft model);
    # None where nothing was drafted for the generation.
    drafted: bool | None = None


class _UntrimmedBPEDetokenizer(BPEStreamingDetokenizer):  # type: ignore[misc]  # mlx-lm is untyped
    """mlx-lm's BPE detokenizer drops the first token's leading space, right for a chat reply
    but wrong for a continuation ("The capital is" + " Paris")."""

    def _maybe_trim_space(self, current_text: str) -> str:
        return current_text


def detokenizer_for(tokenizer: object, continuation: bool) -> Any:
    detokenizer = tokenizer.detokenizer  # type: ignore[attr-defined]  # a fresh copy per call
    if continuation and type(detokenizer) is BPEStreamingDetokenizer:
        detokenizer.__class__ = _UntrimmedBPEDetokenizer
    elif continuation and isinstance(detokenizer, SPMStreamingDetokenizer):
        detokenizer.trim_space = False
    return detokenizer


def stop_tokens(loaded: LoadedModel) -> frozenset[int]:
    """The model's end-of-turn tokens (the adapter's: the tokenizer's EOS ids and the family's)."""
    return frozenset(loaded.chat.get_stop_tokens())


def token_logprob(tokenizer: object, token: int, logprobs: mx.array, top: int) -> TokenLogprob:
    """The chosen token's logprob and the `top` most likely alternatives (on the MLX thread)."""
    decode = tokenizer.decode  # type: ignore[attr-defined]
    alternatives: list[tuple[str, float]] = []
    if top > 0:
        ids = mx.argpartition(-logprobs, kth=top - 1)[:top]
        values = logprobs[ids]
        order = mx.argsort(-values)
        top_ids: list[int] = ids[order].tolist()  # type: ignore[assignment]  # 1-d array -> list
        top_values: list[float] = values[order].tolist()  # type: ignore[assignment]
        alternatives = [(decode([i]), v) for i, v in zip(top_ids, top_values, strict=True)]
    chosen: float = logprobs[token].item()  # type: ignore[assignment]  # a scalar
    return TokenLogprob(token=decode([token]), logprob=chosen, top=alternatives)


class TokenDecoder:
    """One generation's tokens as steps: text, logprobs, and the finish ("stop" on an
    end-of-turn token, "length" after the `max_tokens`-th token). Runs on the MLX thread."""

    def __init__(self, loaded: LoadedModel, params: GenerationParams, max_tokens: int) -> None:
        self._tokenizer = loaded.tokenizer
        self._stop_tokens = stop_tokens(loaded)
        self._detokenizer = detokenizer_for(loaded.tokenizer, params.continuation)
        self._top = params.top_logprobs
        self.left = max_tokens  # tokens still to generate
        self.finished = False

    def decode(self, token: int, logprobs: mx.array, drafted: bool | None = None) -> list[TokenStep]:
        """A sampled token's steps: its text (none for a stop token), then the finish it causes;
        `drafted`: whether a draft proposed it (None: the generation does not speculate)."""
        if token in self._stop_tokens:
            return [self.finish("stop")]
        self._detokenizer.add_token(token)
        self.left -= 1
        top = self._top
        logprob = None if top is None else token_logprob(self._tokenizer, token, logprobs, top)
        steps = [TokenStep(self._detokenizer.last_segment, logprob, None, drafted)]
        if self.left <= 0:
            steps.append(self.finish("length"))
        return steps

    def finish(self, reason: FinishReason) -> TokenStep:
        """The last step: what the detokenizer still held, with the finish reason."""
        self.finished = True
        self._detokenizer.finalize()
        return TokenStep(self._detokenizer.last_segment, None, reason)
