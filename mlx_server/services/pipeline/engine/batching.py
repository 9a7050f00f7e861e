"""Continuous batching of a text model's generations (issue #14: batching and fair prefill).

Every running generation of a model decodes in one batched step of mlx-lm's `BatchGenerator`,
except one that is alone: it runs a loop of its own (`Alone`, without the batch's per-step
cost) until another arrives, then moves into the batch where it stands. Each sequence keeps its
own sampler (its own PRNG key, so `seed` reproduces), logits processors (penalties, biases, the
grammar), stop tokens and KV cache, and new requests join between steps. The batch keeps the
MLX thread (`utils/metal.py`, a held stream) from step to step while no other job waits, so its
steps follow each other without a round trip through the event loop per token; embeddings,
speech and solo streams that arrive run after the current step. Each step decodes one token for
every running sequence and prefills at most one chunk (MLX_SERVER_PREFILL_CHUNK_TOKENS) of the
prompts waiting to join, so a long prompt no longer freezes the others' output, and short
prompts arriving together are prefilled together. A cancelled request (client gone, timeout)
leaves at the next step, also in the middle of its prefill.

Threads: `submit` and `cancel` run on the event loop and hand sequences over under a lock; the
`BatchGenerator` and the KV caches are only touched on the MLX thread, by one `_Run` (one
`MetalThread.stream`) that lasts while the model has sequences and ends by itself.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import AsyncGenerator, Iterator
from typing import Any

import mlx.core as mx
from mlx_lm.generate import BatchGenerator, StopSequences
from mlx_lm.models.cache import make_prompt_cache

from mlx_server.config import get_settings
from mlx_server.models.loaders import LoadedModel
from mlx_server.services.pipeline.engine.batch_lookup import can_verify, lookup_step, proposals_for
from mlx_server.services.pipeline.engine.prompt_lookup import NgramDrafts
from mlx_server.services.pipeline.engine.sequence import (
    Alone,
    BatchedSequence,
    Progress,
    decoder_of,
    lookup_width,
    predicted_tokens,
    start_sequence,
)
from mlx_server.services.pipeline.engine.token_text import TokenStep, stop_tokens
from mlx_server.utils.metal import heal_random_key, stream_on_metal_thread

logger = logging.getLogger("mlx_server.batching")

# Prompts prefilled together at most (within the batch size): their chunks are one batched call.
PREFILL_BATCH = 8


def can_batch(loaded: LoadedModel) -> bool:
    """Whether the model's KV cache can join a batch (mlx-lm merges caches that know how)."""
    return all(hasattr(layer, "merge") for layer in make_prompt_cache(loaded.model))


def batch_size_for(model_id: str) -> int:
    settings = get_settings()
    return settings.model_batch_sizes.get(model_id, settings.max_batch_size)


Items = list[tuple[BatchedSequence, TokenStep | BaseException]]


def _healed(items: Items) -> Items:
    """`items`, the MLX thread's random key made usable again if a sequence failed (its error,
    caught here to end that sequence only, may have come from inside a compiled sampler)."""
    if any(isinstance(result, BaseException) for _, result in items):
        heal_random_key()
    return items


class _Run:
    """The MLX thread's side: a sequence alone runs on its own (`Alone`), several decode in one
    BatchGenerator; stepped while there are sequences."""

    def __init__(self, engine: BatchEngine) -> None:
        self.engine = engine
        loaded = engine.loaded
        size = engine.max_batch_size
        self.generator = BatchGenerator(
            loaded.model,
            completion_batch_size=size,
            prefill_batch_size=min(size, PREFILL_BATCH),
            prefill_step_size=get_settings().prefill_chunk_tokens,
        )
        self.stops = StopSequences([[t] for t in stop_tokens(loaded)])
        self.running: dict[int, BatchedSequence] = {}
        self.alone: Alone | None = None
        # Prompt lookup in the batch (batch_lookup.py): the drafts of each running sequence that
        # speculates, by uid; they hold every token the sequence has reported.
        self.drafts: dict[int, NgramDrafts] = {}

    def steps(self) -> Iterator[Items]:
        try:
            while True:
                items = self._admit()
                if self.alone is not None:
                    items += self._step_alone(self.alone)
                elif self.running:
                    stepped, healthy = self._advance()
                    items += stepped
                    if not healthy:  # the batch's state is unknown: the next run starts afresh
                        yield _healed(items)
                        return
                else:
                    if items:
                        yield _healed(items)
                    return
                yield _healed(items)
                self.engine.figures = self._figures()
        finally:
            self.engine.figures = {"running": 0, "prefilling": 0, "queued": 0}
            self.generator.close()

    def _admit(self) -> Items:
        """Start the sequences that arrived (the first, if alone, runs on its own; with company,
        that one moves into the batch), remove those that left; a start that fails ends its own
        sequence only."""
        arriving, leaving = self.engine.hand_over()
        arriving = [s for s in arriving if s not in leaving]
        items: Items = []
        loaded = self.engine.loaded
        alone = self.alone
        if alone is not None and alone.sequence in leaving:
            alone.leave()
            self.alone = alone = None
        if alone is None and not self.running and len(arriving) == 1:
            try:
                self.alone = Alone(loaded, arriving[0], start_sequence(loaded, arriving[0]))
            except Exception as exc:
                items.append((arriving[0], exc))
            arriving = []
        elif alone is not None and arriving:
            self.alone = None
            try:
                items += [(alone.sequence, step) for step in alone.hand_over()]
                if not alone.finished:
                    self._insert(alone.sequence, alone.progress, alone.drafts)
            except Exception as exc:  # the cache may be half-updated: it is dropped
                items.append((alone.sequence, exc))
        for sequence in arriving:
            try:
                self._insert(sequence, start_sequence(loaded, sequence))
            except Exception as exc:
                items.append((sequence, exc))
        # By identity: uids start again at 0 in every run, and a sequence of an earlier run may leave.
        gone = [s.uid for s in leaving if self.running.get(s.uid) is s]
        if gone:
            kept = self.generator.remove(gone, return_prompt_caches=True)
            for uid in gone:
                del self.running[uid]
                self.drafts.pop(uid, None)
            for cache, tokens in kept.values():  # what a cancelled request had already computed
                loaded.prompt_cache.give_back(cache, tokens)
        return items

    def _step_alone(self, alone: Alone) -> Items:
        try:
            steps = alone.advance()
        except Exception as exc:  # a step that failed midway may have left the cache uneven: dropped
            self.alone = None
            return [(alone.sequence, exc)]
        if alone.finished:
            self.alone = None
        return [(alone.sequence, step) for step in steps]

    def _insert(
        self, sequence: BatchedSequence, progress: Progress, drafts: NgramDrafts | None = None
    ) -> None:
        """Join the batch where `progress` stands (with the drafts it had alone, if any)."""
        (sequence.uid,) = self.generator.insert(
            [progress.todo],
            max_tokens=[progress.left],
            caches=[progress.cache],
            all_tokens=[progress.fed],
            samplers=[progress.sampler],
            logits_processors=[[progress.processors] if progress.processors else []],
            stop_sequences=[self.stops],
        )
        self.running[sequence.uid] = sequence
        width = lookup_width(sequence)
        if width:  # the drafts hold every token before the first one the batch will report
            if drafts is None:
                drafts = NgramDrafts(progress.fed, width, predicted_tokens(self.engine.loaded, sequence))
            drafts.extend(progress.todo)
            self.drafts[sequence.uid] = drafts

    def _advance(self) -> tuple[Items, bool]:
        """One step: a token for every decoding sequence and a chunk of the waiting prompts, or,
        when every sequence has a prompt-lookup proposal and no prompt waits, one pass that
        verifies them all (batch_lookup.py); and whether the batch is still sound."""
        generator = self.generator
        batch = generator._generation_batch  # mlx-lm exposes no public handle
        proposals, read = None, False
        prefilling = generator._unprocessed_sequences or len(generator._prompt_batch)
        if self.drafts and not prefilling and can_verify(batch):
            proposals, read = proposals_for(batch, self.drafts)
        try:
            if proposals is not None:
                with mx.stream(generator.stream):
                    responses: list[Any] = lookup_step(batch, proposals, self.drafts)
            else:
                _, responses = generator.next()
                if not read:  # else the pending tokens reported now are in their drafts already
                    for response in responses:
                        if response.uid in self.drafts:
                            self.drafts[response.uid].extend([response.token])
        except Exception as exc:  # every sequence of the batch ends with the error
            items: Items = [(sequence, exc) for sequence in self.running.values()]
            self.running.clear()
            self.drafts.clear()
            return items, False
        items = []
        failed = [s for s in self.running.values() if s.error is not None]
        if failed:
            self.generator.remove([s.uid for s in failed])
        for sequence in failed:
            del self.running[sequence.uid]
            self.drafts.pop(sequence.uid, None)
            items.append((sequence, sequence.error or RuntimeError("failed")))
        loaded = self.engine.loaded
        for response in responses:
            member = self.running.get(response.uid)
            if member is None:  # failed above, or finished earlier in this step
                continue
            decoder = decoder_of(member)
            drafted = getattr(response, "drafted", False) if response.uid in self.drafts else None
            steps = decoder.decode(response.token, response.logprobs, drafted)
            # mlx-lm counts the same budget and stop tokens; should it end a sequence first, it still ends
            if response.finish_reason is not None and not decoder.finished:
                steps.append(decoder.finish("length"))
            items.extend((member, step) for step in steps)
            if response.finish_reason is not None:
                del self.running[response.uid]
                self.drafts.pop(response.uid, None)
                loaded.prompt_cache.give_back(response.prompt_cache, response.all_tokens)
        return items, True

    def _figures(self) -> dict[str, int]:
        if self.alone is not None:
            decoding = int(self.alone.pending is not None)
            return {"running": decoding, "prefilling": 1 - decoding, "queued": 0}
        generator = self.generator
        decoding = len(generator._generation_batch)  # mlx-lm exposes no public counts
        prefilling = len(generator._prompt_batch)
        return {
            "running": decoding,
            "prefilling": prefilling,
            "queued": len(self.running) - decoding - prefilling,
        }


class BatchEngine:
    """A model's batch: sequences handed over by the event loop, stepped on the MLX thread."""

    def __init__(self, loaded: LoadedModel) -> None:
        self.loaded = loaded
        self.max_batch_size = batch_size_for(loaded.model_id)
        self._lock = threading.Lock()
        self._arriving: list[BatchedSequence] = []
        self._leaving: set[BatchedSequence] = set()
        # Sequences submitted and not yet ended (event loop only): told if the driver fails.
        self._members: set[BatchedSequence] = set()
        self._driver: asyncio.Task[None] | None = None
        self.figures: dict[str, int] = {"running": 0, "prefilling": 0, "queued": 0}

    @property
    def waiting(self) -> int:
        """Submitted sequences the MLX thread has not taken yet."""
        return len(self._arriving)

    def submit(self, sequence: BatchedSequence) -> None:
        with self._lock:
            self._arriving.append(sequence)
        self._members.add(sequence)
        if self._driver is None:
            self._driver = asyncio.get_running_loop().create_task(self._drive())

    def end(self, sequence: BatchedSequence, finished: bool) -> None:
        """The consumer is done with `sequence`; unless it finished, it leaves at the next step."""
        if sequence not in self._members:
            return
        self._members.discard(sequence)
        if not finished:
            with self._lock:
                self._leaving.add(sequence)

    def hand_over(self) -> tuple[list[BatchedSequence], set[BatchedSequence]]:
        """On the MLX thread: the sequences that arrived and those that left since the last step."""
        with self._lock:
            arriving, self._arriving = self._arriving, []
            leaving, self._leaving = self._leaving, set()
        return arriving, leaving

    def _fail_members(self, exc: Exception) -> None:
        """Every sequence not ended yet gets `exc`, and none of them is inserted later."""
        with self._lock:
            self._arriving.clear()
        for sequence in self._members:
            sequence.items.put_nowait(exc)

    async def _drive(self) -> None:
        """Step the batch while it has sequences; a sequence that arrives as a run ends starts
        the next run."""
        try:
            while True:
                async for items in stream_on_metal_thread(lambda: _Run(self).steps(), hold=True):
                    for sequence, item in items:
                        sequence.items.put_nowait(item)
                with self._lock:
                    if not self._arriving:
                        return
        except Exception as exc:  # outside a step (a step's own errors arrive as items)
            logger.exception("the batch of %s failed", self.loaded.model_id)
            self._fail_members(exc)
        except asyncio.CancelledError:  # the server is shutting down
            self._fail_members(RuntimeError("the server stopped"))
            raise
        finally:
            self._driver = None
            with self._lock:
                if not self._arriving and _engines.get(id(self.loaded)) is self:
                    del _engines[id(self.loaded)]


# The engines of models with sequences, by LoadedModel identity; an idle engine is dropped.
_engines: dict[int, BatchEngine] = {}


def engine_for(loaded: LoadedModel) -> BatchEngine:
    engine = _engines.get(id(loaded))
    if engine is None:
        engine = _engines[id(loaded)] = BatchEngine(loaded)
    return engine


def batch_figures() -> dict[str, dict[str, int]]:
    """Per model id: its batch size, and its sequences decoding, prefilling and queued."""
    figures: dict[str, dict[str, int]] = {}
    for engine in list(_engines.values()):
        queued = engine.figures["queued"] + engine.waiting
        figures[engine.loaded.model_id] = {
            **engine.figures,
            "queued": queued,
            "max_batch_size": engine.max_batch_size,
        }
    return figures


async def batched_steps(loaded: LoadedModel, sequence: BatchedSequence) -> AsyncGenerator[TokenStep, None]:
    """The steps of one generation run in its model's batch; closing early leaves the batch."""
    engine = engine_for(loaded)
    engine.submit(sequence)
    finished = False
    try:
        while not finished:
            if sequence.items.empty():
                item = await sequence.items.get()
            else:  # a turn of the loop between pieces, as the solo path's one job per token gives
                await asyncio.sleep(0)
                item = sequence.items.get_nowait()
            if isinstance(item, BaseException):
                finished = True
                raise item
            finished = item.finish_reason is not None
            yield item
    finally:
        engine.end(sequence, finished)
