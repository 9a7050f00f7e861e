"""Prompt lookup inside the batch (#33): one forward pass verifies every row's drafts.

Alone, a generation verifies its own drafts (`Alone`, prompt_lookup.py). In the batch, mlx-lm's
`GenerationBatch` feeds one token per row per step; when every row has a proposal, this step
replaces one of its steps: each row's pending token (the one the batch already sampled) and its
drafts go through the model in one pass of shape rows x (1 + the longest proposal), every row
samples its positions with its own sampler and logits processors, and each row keeps drafts up
to the first one its model would not have produced.

The rows share one KV cache (mlx-lm's BatchKVCache), which trims all rows alike: giving each
row its own length back would move every layer's keys and values (~140 ms a pass here, more
than the drafts save). So the batch keeps the drafts all rows accepted (the fewest any row
accepted) and each row's own token at that position; a row that accepted more gets the rest
proposed again at the next step. Rows that write the same kind of text (an agent's edits, the
same request sent by several clients) accept alike and keep nearly all. What the clients get is
exactly what one token at a time gives: the drafts kept are the tokens each row's own sampler
drew at those positions, the sampler's keys move past those draws only (sampling.py), and the
batch's state after the step (cache, tokens, the next pending token and its logprobs) is the
one its own steps would have left, so its next step may be either kind.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import mlx.core as mx
from mlx_lm.models.cache import BatchKVCache

from mlx_server.services.pipeline.engine.prompt_lookup import NgramDrafts, accepted_drafts, position_logprobs
from mlx_server.services.pipeline.engine.sampling import TokenSampler


@dataclass
class Decided:
    """A token a lookup step decided for a row: the fields of mlx-lm's
    `GenerationBatch.Response`, and whether a draft proposed it."""

    uid: int
    token: int
    logprobs: mx.array
    finish_reason: str | None
    prompt_cache: list[Any] | None
    all_tokens: list[int] | None
    drafted: bool


def can_verify(batch: Any) -> bool:
    """Whether `batch` (a GenerationBatch) can take a lookup step: a plain KV cache in every
    layer (trimmable alike for all rows) and our samplers, which draw several positions."""
    return (
        len(batch) > 0
        and all(isinstance(layer, BatchKVCache) for layer in batch.prompt_cache)
        and all(isinstance(sampler, TokenSampler) for sampler in batch.samplers)
    )


def proposals_for(batch: Any, drafts: dict[int, NgramDrafts]) -> tuple[list[list[int]] | None, bool]:
    """Each row's proposal after its pending token, or None where a row has none (the batch then
    takes mlx-lm's own step); and whether the pending tokens were read and added to their rows'
    drafts (they were if every row looked for a match: the caller must not add them again)."""
    if len(batch) == 0 or not all(uid in drafts for uid in batch.uids):
        return None, False
    looking = [drafts[uid].may_propose() for uid in batch.uids]  # each row's pause counts
    if not all(looking):
        return None, False
    pending: list[int] = batch._next_tokens.tolist()
    proposals = []
    for row, uid in enumerate(batch.uids):
        drafts[uid].extend([pending[row]])
        # Room after the pending token (its own) for drafts and the model's token after them.
        room = batch.max_tokens[row] - batch._num_tokens[row] - 2
        proposals.append(drafts[uid].propose(room) if room >= 1 else [])
    return (proposals if all(proposals) else None), True


def lookup_step(batch: Any, proposals: list[list[int]], drafts: dict[int, NgramDrafts]) -> list[Decided]:
    """One pass over every row's pending token and proposal (`proposals_for`); the tokens
    decided, in order per row, with the finishes mlx-lm's step would report. Rows that finish
    leave the batch, as in `GenerationBatch.next`."""
    pending: list[int] = batch._next_tokens.tolist()
    pending_logprobs = batch._next_logprobs
    width = 1 + max(len(p) for p in proposals)
    # A row with a shorter proposal is filled with its last token: those positions are not compared.
    rows = [
        [token, *p, *[(p or [token])[-1]] * (width - 1 - len(p))]
        for token, p in zip(pending, proposals, strict=True)
    ]
    sampled, logprobs = _sample(batch, rows, proposals)
    accepted = [accepted_drafts(drawn, proposal) for drawn, proposal in zip(sampled, proposals, strict=True)]
    kept = min(accepted)  # drafts every row accepted: the cache keeps them for all rows alike
    for uid, proposal in zip(batch.uids, proposals, strict=True):
        # What the batch kept sets the widths and pauses: a wider pass than it keeps is waste.
        drafts[uid].record(len(proposal), kept)
    for layer in batch.prompt_cache:
        layer.trim(width - 1 - kept)

    decided: list[Decided] = []
    keep = []
    for i, uid in enumerate(batch.uids):
        batch.samplers[i].keep(kept + 1)
        fed = rows[i][: kept + 1]
        batch.tokens[i].extend(fed)
        if batch.logits_processors[i]:
            batch._token_context[i].update_and_fetch(mx.array(fed))
        row_logprobs = [pending_logprobs[i], *(logprobs[i][j] for j in range(kept))]
        if _report(batch, i, fed, row_logprobs, drafts[uid], decided):
            keep.append(i)
    batch._next_tokens = mx.array([drawn[kept] for drawn in sampled])
    batch._next_logprobs = [row[kept] for row in logprobs]
    if len(keep) < len(batch.uids):
        batch.filter(keep)
    return decided


def _sample(
    batch: Any, rows: list[list[int]], proposals: list[list[int]]
) -> tuple[list[list[int]], list[mx.array]]:
    """The pass over `rows`; per row, its positions from the pending token to its last draft
    sampled with its own logits processors (seeing the tokens before each position) and sampler,
    and their logprobs."""
    logits = batch.model(mx.array(rows), cache=batch.prompt_cache)
    drawn, logprobs = [], []
    for i, proposal in enumerate(proposals):
        fed = rows[i][: len(proposal) + 1]
        processors = batch.logits_processors[i] or ()
        row_logprobs = position_logprobs(logits[i, : len(fed)], processors, batch.tokens[i], fed)
        logprobs.append(row_logprobs)
        drawn.append(batch.samplers[i].draw_rows(row_logprobs))
    mx.eval(drawn, logprobs)
    return [d.tolist() for d in drawn], logprobs


def _report(
    batch: Any, i: int, fed: list[int], logprobs: list[mx.array], drafts: NgramDrafts, decided: list[Decided]
) -> bool:
    """Row `i`'s tokens kept (its pending token, then the drafts) into `decided`, counted and
    matched against its stop tokens as mlx-lm's step does; whether the row goes on."""
    uid = batch.uids[i]
    for j, token in enumerate(fed):
        batch._num_tokens[i] += 1
        finish = "length" if batch._num_tokens[i] >= batch.max_tokens[i] else None
        if batch._matchers[i].advance(token):
            finish = "stop"
        if finish is not None:
            cache = batch.extract_cache(i)
            decided.append(Decided(uid, token, logprobs[j], finish, cache, batch.tokens[i], j > 0))
            return False
        decided.append(Decided(uid, token, logprobs[j], None, None, None, j > 0))
        if j > 0:  # the pending token is in the drafts already (proposals_for)
            drafts.extend([token])
    return True
