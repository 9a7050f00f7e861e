"""The multi-entry prefix cache with the real SmolLM2: longest-prefix reuse per conversation,
greedy output unchanged by a hit, entries no request can change, the byte bound, and the pool
counting, shedding and freeing its bytes."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from functools import partial
from typing import Any

import mlx.core as mx
from mlx_lm.generate import generate_step
from mlx_lm.sample_utils import make_sampler

from mlx_server.models.loaders import LoadedModel
from mlx_server.models.pool import ModelPoolManager
from mlx_server.models.prompt_cache import MiB, PromptCache
from mlx_server.utils.metal import run_on_metal_thread

TOKENS = 4  # enough to compare greedy output with and without a hit; each costs a decode step


def _prompt(tokenizer: Any, system: str, *turns: str) -> list[int]:
    messages = [{"role": "system", "content": system}]
    for i, text in enumerate(turns):
        messages.append({"role": "user" if i % 2 == 0 else "assistant", "content": text})
    ids: list[int] = tokenizer.apply_chat_template(messages, add_generation_prompt=True)
    return ids


def _steps(model: Any, cache: PromptCache, prompt: list[int]) -> Iterator[int]:
    """Greedy tokens for `prompt` through `cache`, as the pipeline runs them: take, generate,
    give back what was fed."""
    kv, reused = cache.take(model, prompt)
    fed = list(prompt)
    tokens = generate_step(
        mx.array(prompt[reused:]), model, max_tokens=TOKENS, sampler=make_sampler(0.0), prompt_cache=kv
    )
    try:
        for token, _ in tokens:
            fed.append(token)
            yield token
    finally:
        tokens.close()
        cache.give_back(kv, fed)


def _greedy(model: Any, cache: PromptCache, prompt: list[int]) -> tuple[list[int], int]:
    """The tokens, and how many prompt tokens came from the cache."""
    hits_before = cache.reused_tokens
    return list(_steps(model, cache, prompt)), cache.reused_tokens - hits_before


def _fresh(model: Any, prompt: list[int]) -> list[int]:
    return _greedy(model, PromptCache(0), prompt)[0]


# Prompts of 35-50 tokens: prefill runs ~10 tokens/s on this CPU, and every test prefills some
# prompts twice (with and without the cache).
SYSTEM_A = "You are a terse assistant for a bakery. " * 3
SYSTEM_B = "You answer questions about railway timetables in Europe. " * 2


def _system_tokens(tokenizer: Any, system: str) -> int:
    """The prompt tokens a conversation with `system` shares with any other: its system turn."""
    return len(_prompt(tokenizer, system, "")) - 10


def test_alternating_conversations_each_reuse_their_own_prefix(smollm: tuple[Any, Any]) -> None:
    model, tokenizer = smollm
    cache = PromptCache(256 * MiB)
    system_tokens = {s: _system_tokens(tokenizer, s) for s in (SYSTEM_A, SYSTEM_B)}
    turns: dict[str, list[str]] = {SYSTEM_A: [], SYSTEM_B: []}
    for round_no, question in enumerate(["Hello?", "Open on Sunday?", "And on Monday?"]):
        for system in (SYSTEM_A, SYSTEM_B):
            turns[system].append(question)
            prompt = _prompt(tokenizer, system, *turns[system])
            tokens, reused = _greedy(model, cache, prompt)
            turns[system].append(tokenizer.decode(tokens))
            if round_no > 0:
                # Its own system prompt and earlier turns, not just the template's first tokens.
                assert reused >= system_tokens[system], (round_no, reused)
    assert cache.entries >= 2


def test_greedy_output_is_the_same_with_and_without_a_hit(smollm: tuple[Any, Any]) -> None:
    model, tokenizer = smollm
    cache = PromptCache(256 * MiB)
    first = _prompt(tokenizer, SYSTEM_A, "What bread do you sell?")
    second = _prompt(tokenizer, SYSTEM_A, "When do you open?")
    _greedy(model, cache, first)
    cached, reused = _greedy(model, cache, second)
    assert reused >= _system_tokens(tokenizer, SYSTEM_A)
    assert cached == _fresh(model, second)
    # The exact same prompt again: everything but the last token comes from the cache.
    again, reused = _greedy(model, cache, second)
    assert reused == len(second) - 1 and again == cached


def test_concurrent_requests_sharing_an_entry_do_not_change_it(smollm: tuple[Any, Any]) -> None:
    model, tokenizer = smollm
    cache = PromptCache(256 * MiB)
    base = _prompt(tokenizer, SYSTEM_B, "Is there a train to Lyon?")
    _greedy(model, cache, base)
    bytes_before = cache.nbytes
    prompts = [
        _prompt(tokenizer, SYSTEM_B, q) for q in ("Is there a night train?", "Where do I buy tickets?")
    ]
    # Both take a copy of the same entry and decode step by step, interleaved, before either
    # gives its cache back.
    streams = [_steps(model, cache, p) for p in prompts]
    interleaved: list[list[int]] = [[], []]
    for _ in range(TOKENS):
        for out, stream in zip(interleaved, streams, strict=True):
            out.append(next(stream))
    assert cache.hits == 2 and cache.nbytes == bytes_before  # nothing given back yet
    for stream in streams:
        stream.close()
    assert interleaved == [_fresh(model, p) for p in prompts]
    assert _greedy(model, cache, base)[0] == _fresh(model, base)  # the shared entry is intact


def test_the_cache_never_holds_more_than_its_budget(smollm: tuple[Any, Any]) -> None:
    model, tokenizer = smollm
    budget = 40 * MiB  # about three of SmolLM2's 256-token KV buffers (float32 on this CPU)
    cache = PromptCache(budget)
    seen_entries = []
    for topic in ("cheese", "rivers", "chess", "tea", "glaciers", "owls"):
        _greedy(model, cache, _prompt(tokenizer, f"You know everything about {topic}.", "Tell me one fact."))
        assert 0 < cache.nbytes <= budget
        seen_entries.append(cache.entries)
    assert max(seen_entries) >= 2 and seen_entries[-1] < len(seen_entries)  # kept many, evicted some
    cache.clear()
    assert (cache.nbytes, cache.entries) == (0, 0)


async def _fill(pool: ModelPoolManager, model_id: str, tokenizer: Any, count: int) -> LoadedModel:
    """`count` entries in the model's cache, one per distinct system prompt."""
    async with pool.lease(model_id) as loaded:
        for i in range(count):
            prompt = _prompt(tokenizer, f"Entry number {i}.", "Hi.")
            await run_on_metal_thread(partial(_greedy, loaded.model, loaded.prompt_cache, prompt))
        return loaded


def test_the_pool_counts_sheds_and_frees_the_cache(
    two_models: tuple[str, str], smollm: tuple[Any, Any]
) -> None:
    a, b = two_models
    tokenizer = smollm[1]

    async def main() -> None:
        pool = ModelPoolManager(budget_bytes=2**40, max_models=4, idle_ttl_seconds=0)
        loaded = await _fill(pool, a, tokenizer, 2)
        held = loaded.prompt_cache.nbytes
        status = pool.status()
        assert held > 0 and status["prompt_cache_bytes"] == held
        assert status["used_bytes"] == loaded.size_bytes + held
        assert status["models"][0]["prompt_cache"]["entries"] == 2

        # A budget that fits both models but not all of a's cache (one of its two entries): the
        # load sheds cache, not a.
        pool.budget_bytes = 2 * loaded.size_bytes + held // 2
        async with pool.lease(b):
            assert [m["id"] for m in pool.status()["models"]] == [b, a]
            assert 0 < loaded.prompt_cache.nbytes <= held // 2
            assert pool.used_bytes <= pool.budget_bytes

        memory_with_cache = mx.get_active_memory()
        cache = loaded.prompt_cache
        await pool.unload(a)
        assert (cache.nbytes, cache.entries) == (0, 0)
        assert mx.get_active_memory() < memory_with_cache - loaded.size_bytes

    asyncio.run(main())
