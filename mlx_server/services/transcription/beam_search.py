"""Beam search over one Whisper window, our own decoder on mlx-audio's model (mlx-audio 0.6.2's
`decode` raises NotImplementedError for `beam_size`).

The search is Whisper's (the paper's decoding set-up; openai/whisper's beam decoder): it keeps
`beam_size` live sequences; at each step every one proposes its `beam_size + 1` likeliest next
tokens, the proposals are ranked by their summed log probability, those that end the text are
set aside as finished and the best of the others live on. It stops once `round(beam_size *
patience)` have finished (patience: arXiv:2204.05424) or the window's token budget is spent,
and the finished sequence with the best log probability per token wins (no length penalty, as
Whisper's default). The logits pass through mlx-audio's own filters (blank and non-speech
suppression, the timestamp rules), so a beam's text obeys the rules greedy's does.

Ours: the prompt (the text heard so far, up to 223 tokens) runs once and its self-attention
cache is copied to the beams; the cross-attention keys and values (the audio's, the same for
every beam) are kept once and broadcast in the attention, never copied or reordered per step.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any

import mlx.core as mx
import numpy as np

# A decoder block's cache: ((self keys, self values), (cross keys, cross values)).
Cache = list[tuple[tuple[mx.array, mx.array], tuple[mx.array, mx.array]]]


@dataclass
class BeamState:
    """The search between steps: live sequences (whole token lists, prompt included) with their
    summed log probabilities, and the finished ones (sampled tokens, end-of-text left out)."""

    beam_size: int
    wanted: int  # finished sequences that end the search
    live: list[list[int]]
    sums: list[float]
    finished: dict[tuple[int, ...], float] = field(default_factory=dict)

    def advance(self, logprobs: mx.array, eot: int, sample_begin: int) -> list[int]:
        """Take one step from `logprobs` (live x vocabulary, filtered); the live sequence each
        new one grew from, for the cache."""
        width = self.beam_size + 1
        top = mx.argpartition(-logprobs, kth=width - 1, axis=-1)[:, :width]
        top_logprobs = mx.take_along_axis(logprobs, top, axis=-1)
        tokens, values = np.array(top).tolist(), np.array(top_logprobs).tolist()
        proposals = [
            (self.sums[row] + value, row, token)
            for row, (row_tokens, row_values) in enumerate(zip(tokens, values, strict=True))
            for token, value in zip(row_tokens, row_values, strict=True)
        ]
        proposals.sort(reverse=True)
        live, sums, sources = [], [], []
        for score, row, token in proposals:
            if not math.isfinite(score):  # suppressed tokens: nothing likelier is left
                break
            if token == eot:
                if len(self.finished) < self.wanted:  # proposals come best first
                    self.finished[tuple(self.live[row][sample_begin:])] = score
                continue
            live.append([*self.live[row], token])
            sums.append(score)
            sources.append(row)
            if len(live) == self.beam_size:
                break
        self.live, self.sums = live, sums
        return sources

    @property
    def done(self) -> bool:
        return len(self.finished) >= self.wanted or not self.live

    def best(self, sample_begin: int) -> tuple[list[int], float]:
        """The winning tokens and their summed log probability; live sequences compete too
        (best first) when fewer than `beam_size` finished."""
        candidates = dict(self.finished)
        for row in np.argsort(self.sums)[::-1]:
            if len(candidates) >= self.beam_size:
                break
            candidates.setdefault(tuple(self.live[row][sample_begin:]), self.sums[row])
        if not candidates:  # nothing but suppressed tokens was left: no text
            return [], 0.0
        best = max(candidates, key=lambda tokens: candidates[tokens] / max(1, len(tokens)))
        return list(best), candidates[best]


def _reorder(cache: Cache, sources: list[int]) -> Cache:
    """The self-attention cache rows of the live sequences' parents; the cross-attention's
    stays one row for all of them."""
    if sources == list(range(cache[0][0][0].shape[0])):
        return cache
    index = mx.array(sources)
    return [((keys[index], values[index]), cross) for (keys, values), cross in cache]


def beam_decode(model: Any, mel: mx.array, options: Any, beam_size: int, patience: float) -> Any:
    """One 30 s window (`mel`: frames x mels) heard with `beam_size` beams at temperature 0:
    mlx-audio's DecodingResult, as `model.decode(mel, options)` returns for greedy."""
    from mlx_audio.stt.models.whisper.decoding import DecodingResult, DecodingTask, compression_ratio

    # mlx-audio's greedy set-up gives the prompt tokens, the logit filters and the token budget.
    task = DecodingTask(model, replace(options, temperature=0.0, beam_size=None, patience=None))
    tokenizer, sample_begin = task.tokenizer, task.sample_begin
    features = model.encoder(mel[None])
    prompt = list(task.initial_tokens)
    logits, cache, _ = model.decoder(mx.array([prompt]), features)
    no_speech = float("nan")
    if tokenizer.no_speech is not None:
        at_sot = mx.softmax(logits[0, task.sot_index].astype(mx.float32))
        no_speech = float(at_sot[tokenizer.no_speech])
    state = BeamState(beam_size, max(1, round(beam_size * patience)), [prompt], [0.0])
    for _ in range(task.sample_len):
        scores = logits[:, -1].astype(mx.float32)
        grown = mx.array(state.live)
        for logit_filter in task.logit_filters:
            scores = logit_filter.apply(scores, grown)
        logprobs = scores - mx.logsumexp(scores, axis=-1, keepdims=True)
        sources = state.advance(logprobs, tokenizer.eot, sample_begin)
        if state.done or len(state.live[0]) > task.n_ctx:
            break
        cache = _reorder(cache, sources)
        last = mx.array([[tokens[-1]] for tokens in state.live])
        logits, cache, _ = model.decoder(last, features, kv_cache=cache)
    tokens, total = state.best(sample_begin)
    text = tokenizer.decode(tokens).strip()
    return DecodingResult(
        audio_features=features[0],
        language=options.language,
        tokens=tokens,
        text=text,
        avg_logprob=total / (len(tokens) + 1),
        no_speech_prob=no_speech,
        temperature=0.0,
        compression_ratio=compression_ratio(text),
    )
