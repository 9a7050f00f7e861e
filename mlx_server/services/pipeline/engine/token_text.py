"""From sampled token ids to text pieces: the detokenizer and logprobs both token loops share
(the solo generator in generation.py and the batch engine in batching.py)."""

from __future__ import annotations

from dataclasses import dataclass

import mlx.core as mx
from mlx_lm.tokenizer_utils import BPEStreamingDetokenizer, SPMStreamingDetokenizer

from mlx_server.services.pipeline.events import FinishReason, TokenLogprob


@dataclass(frozen=True)
class TokenStep:
    """One token's text (or the finish, whose text is what the detokenizer still held)."""

    text: str
    logprob: TokenLogprob | None
    finish_reason: FinishReason | None


class _UntrimmedBPEDetokenizer(BPEStreamingDetokenizer):  # type: ignore[misc]  # mlx-lm is untyped
    """mlx-lm's BPE detokenizer drops the first token's leading space, right for a chat reply
    but wrong for a continuation ("The capital is" + " Paris")."""

    def _maybe_trim_space(self, current_text: str) -> str:
        return current_text


def detokenizer_for(tokenizer: object, continuation: bool) -> object:
    detokenizer = tokenizer.detokenizer  # type: ignore[attr-defined]  # a fresh copy per call
    if continuation and type(detokenizer) is BPEStreamingDetokenizer:
        detokenizer.__class__ = _UntrimmedBPEDetokenizer
    elif continuation and isinstance(detokenizer, SPMStreamingDetokenizer):
        detokenizer.trim_space = False
    return detokenizer


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
