"""One generation of a text model's batch (batching.py): its state, how it starts, and the loop
it runs while it is alone.

A sequence starts from the longest cached prefix of its prompt (`start_sequence`), with its own
sampler and logits processors. Alone in its model's batch it is stepped by `Alone`, not by
mlx-lm's `BatchGenerator`: for one sequence the batch's machinery is pure cost (see `Alone`).
When another arrives, it joins the batch where its `Progress` stands.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import mlx.core as mx
from mlx_lm.generate import generation_stream
from mlx_lm.models.cache import TokenBuffer

from mlx_server.config import get_settings
from mlx_server.models.loaders import LoadedModel
from mlx_server.services.pipeline.engine.params import CompletionStats, GenerationParams
from mlx_server.services.pipeline.engine.prompt_lookup import NgramDrafts, verify
from mlx_server.services.pipeline.engine.sampling import LogitsProcessor, TokenSampler, sampling_for
from mlx_server.services.pipeline.engine.token_text import TokenDecoder, TokenStep

if TYPE_CHECKING:
    from mlx_server.services.pipeline.engine.constraints import GrammarProcessor


@dataclass(eq=False)
class BatchedSequence:
    """One generation in its model's batch. `items` is read on the event loop; the rest is the MLX
    thread's once the sequence has been handed over."""

    prompt: list[int]
    params: GenerationParams
    max_tokens: int
    constraint: GrammarProcessor | None
    stats: CompletionStats
    items: asyncio.Queue[TokenStep | BaseException] = field(default_factory=asyncio.Queue)
    uid: int = -1
    decoder: TokenDecoder | None = None  # set when the sequence starts, on the MLX thread
    # An error of this sequence's own logits processors (a grammar that lost its way): it ends
    # this sequence only.
    error: BaseException | None = None


class Guarded:
    """A sequence's logits processors as one, catching their errors for that sequence alone:
    an exception inside the batched step would end every sequence of the batch."""

    def __init__(self, sequence: BatchedSequence, processors: list[LogitsProcessor]) -> None:
        self.sequence = sequence
        self.processors = processors

    def __call__(self, tokens: mx.array, logits: mx.array) -> mx.array:
        if self.sequence.error is None:
            try:
                for processor in self.processors:
                    logits = processor(tokens, logits)
            except Exception as exc:  # the sequence is removed after this step
                self.sequence.error = exc
        return logits


@dataclass(eq=False)
class Progress:
    """A sequence outside the BatchGenerator: its KV cache holds the tokens `fed`, `todo` (at
    least one) are still to be fed, `left` tokens are still to be generated."""

    cache: list[Any]
    fed: list[int]
    todo: list[int]
    left: int
    sampler: TokenSampler
    processors: Guarded | None


def start_sequence(loaded: LoadedModel, sequence: BatchedSequence) -> Progress:
    """A new sequence from the longest cached prefix of its prompt, with its own sampler, logits
    processors and token decoder."""
    cache, reused = loaded.prompt_cache.take(loaded.model, sequence.prompt)
    sequence.stats.cached_prompt_tokens = reused
    sequence.decoder = TokenDecoder(loaded, sequence.params, sequence.max_tokens)
    sampler, processors = sampling_for(sequence.params.sampling, sequence.constraint)
    return Progress(
        cache,
        sequence.prompt[:reused],
        sequence.prompt[reused:],
        sequence.max_tokens,
        sampler,
        Guarded(sequence, processors) if processors else None,
    )


def lookup_width(sequence: BatchedSequence) -> int:
    """The most drafts a prompt-lookup proposal of `sequence` holds (0: it decodes one token at a
    time): the request's, else the server's setting; none under a grammar (prompt_lookup.py)."""
    if sequence.constraint is not None:
        return 0
    asked = sequence.params.prompt_lookup
    return get_settings().prompt_lookup_tokens if asked is None else asked


def predicted_tokens(loaded: LoadedModel, sequence: BatchedSequence) -> list[int]:
    """The tokens of the text the request predicted its reply holds (none if it sent none)."""
    text = sequence.params.prediction
    tokens: list[int] = loaded.tokenizer.encode(text, add_special_tokens=False) if text else []
    return tokens


def decoder_of(sequence: BatchedSequence) -> TokenDecoder:
    assert sequence.decoder is not None, "a started sequence"
    return sequence.decoder


class Alone:
    """A sequence alone in its model's batch, stepped without the BatchGenerator.

    For a single sequence the batch's machinery is pure cost: its KV cache is a BatchKVCache
    (an attention mask and array offsets in every layer) and each step does the batch's
    bookkeeping; measured on the 2-core CPU, mlx-lm's BatchGenerator with one sequence decodes
    at ~97-98 % of `generate_step`. So a sequence that arrives to an empty batch runs this loop
    instead, which is `generate_step`'s (plain KV cache; the next token is computed while the
    current one is read), one prompt chunk or one token per step. When another sequence
    arrives, `hand_over` moves it into the BatchGenerator with its cache, its history and the
    token it already sampled: nothing is computed twice and its sampler draws on from where it
    was, so a seeded reply is the same either way. mlx-lm's `generate_step` keeps that pending
    token inside its generator, which is why the loop is ours.
    """

    def __init__(self, loaded: LoadedModel, sequence: BatchedSequence, progress: Progress) -> None:
        self.loaded = loaded
        self.sequence = sequence
        self.progress = progress
        self.decoder = decoder_of(sequence)
        self.chunk = get_settings().prefill_chunk_tokens
        # The tokens the logits processors see: the prompt, then each token fed (as the batch's).
        self.context = TokenBuffer(sequence.prompt[:-1]) if progress.processors else None
        # The next token and its logprobs, being computed; None until the prompt is fed.
        self.pending: tuple[mx.array, mx.array] | None = None
        self.finished = False
        width = lookup_width(sequence)
        prediction = predicted_tokens(loaded, sequence) if width else []
        self.drafts = NgramDrafts(sequence.prompt, width, prediction) if width else None

    def _feed(self, tokens: mx.array) -> tuple[mx.array, mx.array]:
        """Feed `tokens` (the prompt's last, or the token just sampled) and start sampling the
        next one."""
        progress = self.progress
        logits = self.loaded.model(tokens[None], cache=progress.cache)[:, -1, :]
        if self.context is not None and progress.processors is not None:
            logits = progress.processors(self.context.update_and_fetch(tokens), logits)
        logprobs = logits - mx.logsumexp(logits, axis=-1, keepdims=True)
        sampled = progress.sampler(logprobs)
        mx.async_eval(sampled, logprobs)  # type: ignore[no-untyped-call]  # untyped in mlx's stubs
        return sampled, logprobs.squeeze(0)

    def advance(self) -> list[TokenStep]:
        """One chunk of the prompt, or one token (the next one is computed meanwhile)."""
        progress = self.progress
        with mx.stream(generation_stream):
            if self.pending is None:
                if len(progress.todo) > 1:  # the prompt, but its last token, in chunks
                    chunk = progress.todo[: min(self.chunk, len(progress.todo) - 1)]
                    self.loaded.model(mx.array(chunk)[None], cache=progress.cache)
                    mx.eval([c.state for c in progress.cache])
                    progress.fed += chunk
                    progress.todo = progress.todo[len(chunk) :]
                    mx.clear_cache()
                    return []
                self.pending = self._feed(mx.array(progress.todo))
                progress.fed += progress.todo
                progress.todo = []
            if self.drafts is not None:
                return self._lookup_step(*self.pending)
            token, logprobs = self.pending
            last = self.decoder.left <= 1  # nothing follows the budget's last token (as generate_step)
            self.pending = None if last else self._feed(token)
            if self.sequence.error is not None:  # its logits processors failed on this token
                raise self.sequence.error
            value: int = token.item()  # type: ignore[assignment]  # one token
            if not last:
                progress.fed.append(value)
            steps = self._report(value, logprobs)
            if len(progress.fed) % 256 == 0:
                mx.clear_cache()
        return steps

    def _lookup_step(self, token: mx.array, logprobs: mx.array) -> list[TokenStep]:
        """The pending token, and after it the tokens of a prompt-lookup proposal the model
        agrees with (prompt_lookup.py); without a proposal, one token as `advance` does."""
        assert self.drafts is not None
        progress, drafts = self.progress, self.drafts
        if self.decoder.left <= 1:  # the budget's last token: nothing follows it
            return self._report(token.item(), logprobs)  # type: ignore[arg-type]  # one token
        value: int = -1
        proposal: list[int] = []
        looked = drafts.may_propose()
        if looked:  # a match in sight: the token is read first, to propose what follows it
            value = token.item()  # type: ignore[assignment]  # one token
            drafts.extend([value])
            # Room after this token (its report takes one); the model's own token follows the drafts.
            proposal = drafts.propose(self.decoder.left - 2)
        if not proposal:  # the next token is computed while this one becomes text, as `advance` does
            self.pending = self._feed(token)
            if not looked:
                value = token.item()  # type: ignore[assignment]  # one token
                drafts.extend([value])
            progress.fed.append(value)
            if self.sequence.error is not None:
                raise self.sequence.error
            return self._report(value, logprobs)
        steps = self._report(value, logprobs)
        if self.finished:
            return steps
        outcome = verify(
            self.loaded.model,
            progress.cache,
            value,
            proposal,
            progress.sampler,
            progress.processors,
            progress.fed,
        )
        if self.sequence.error is not None:
            raise self.sequence.error
        drafts.record(len(proposal), outcome.accepted)
        fed = [value, *proposal[: outcome.accepted]]
        progress.fed += fed
        if self.context is not None:
            self.context.update_and_fetch(mx.array(fed))
        for decided, row in zip(outcome.tokens[:-1], outcome.logprobs, strict=False):
            steps += self._report(decided, row, drafted=True)
            if self.finished:
                return steps
        drafts.extend(outcome.tokens[:-1])
        self.pending = (mx.array([outcome.tokens[-1]]), outcome.logprobs[-1])
        if len(progress.fed) % 256 < len(fed):
            mx.clear_cache()
        return steps

    def _report(self, token: int, logprobs: mx.array, drafted: bool = False) -> list[TokenStep]:
        """`token`'s steps; after the last one, the cache goes back to the prompt cache."""
        steps = self.decoder.decode(token, logprobs, drafted if self.drafts is not None else None)
        self.progress.left = self.decoder.left
        if self.decoder.finished:
            self.leave()
        return steps

    def hand_over(self) -> list[TokenStep]:
        """Ready the sequence to join the batch: the token already sampled is read (and
        reported), to be fed by the batch; returns its steps. If it was the last, the sequence
        is finished and stays out."""
        if self.pending is None:
            return []
        token, logprobs = self.pending
        self.pending = None
        value: int = token.item()  # type: ignore[assignment]  # one token
        steps = self._report(value, logprobs)
        self.progress.todo = [value]
        return steps

    def leave(self) -> None:
        """Done (finished or cancelled): what the cache holds goes back to the prompt cache."""
        self.finished = True
        self.loaded.prompt_cache.give_back(self.progress.cache, self.progress.fed)
