"""Memory acceptance of the prefix cache (#14) with the real SmolLM2 in the pool: with
MLX_SERVER_PROMPT_CACHE_MB=N the caches of all loaded models together never hold more than N MiB
after many distinct prompts, and unloading the models gives MLX's memory back to within 10 % of
what it held before they loaded."""

from __future__ import annotations

import asyncio
import gc
from functools import partial
from typing import Any

import mlx.core as mx
import pytest

from mlx_server.config import reset_settings
from mlx_server.models.pool import ModelPoolManager
from mlx_server.models.prompt_cache import MiB
from mlx_server.utils.metal import run_on_metal_thread
from tests.mlx_server.models.test_prompt_cache import _greedy, _prompt

BOUND_MB = 40  # about three of SmolLM2's 256-token KV buffers (float32 on this CPU)
# One prompt more than the bound holds: the fourth entry evicts the oldest (two per model).
TOPICS = ["cheese", "rivers", "chess", "tea"]


def _settled_memory() -> int:
    gc.collect()
    mx.clear_cache()
    return int(mx.get_active_memory())


def test_the_bound_holds_for_all_models_together_and_unload_gives_memory_back(
    two_models: tuple[str, str], smollm: tuple[Any, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MLX_SERVER_PROMPT_CACHE_MB", str(BOUND_MB))
    reset_settings()
    tokenizer = smollm[1]

    async def main() -> None:
        before = await run_on_metal_thread(_settled_memory)
        pool = ModelPoolManager(budget_bytes=2**40, max_models=4, idle_ttl_seconds=0)
        held: list[tuple[int, int]] = []
        for i, topic in enumerate(TOPICS):  # alternating between the two models
            async with pool.lease(two_models[i % 2]) as loaded:
                prompt = _prompt(tokenizer, f"You know everything about {topic}.", "One fact, please.")
                await run_on_metal_thread(partial(_greedy, loaded.model, loaded.prompt_cache, prompt))
            status = pool.status()
            caches = [m["prompt_cache"] for m in status["models"]]
            assert status["prompt_cache_max_bytes"] == BOUND_MB * MiB
            assert 0 < status["prompt_cache_bytes"] == sum(c["bytes"] for c in caches) <= BOUND_MB * MiB
            held.append((sum(c["entries"] for c in caches), status["prompt_cache_bytes"]))
        assert max(entries for entries, _ in held) >= 2  # it kept several, then evicted the oldest
        assert held[-1][0] < len(TOPICS)

        await pool.unload_all()
        assert pool.status()["prompt_cache_bytes"] == 0
        after = await run_on_metal_thread(_settled_memory)
        assert abs(after - before) <= 0.1 * before, (before, after)

    asyncio.run(main())
