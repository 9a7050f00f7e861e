"""The model pool with the real SmolLM2: LRU, pinning, freeing memory, shared loads."""

from __future__ import annotations

import asyncio
import gc
from pathlib import Path

import mlx.core as mx
import pytest
from sqlmodel import Session

from mlx_server.database import get_engine, upgrade_database
from mlx_server.errors import APIError
from mlx_server.models.cpu_weights import loaded_bytes_estimate
from mlx_server.models.detection import read_config
from mlx_server.models.pool import ModelPoolManager, get_model_pool
from mlx_server.records import ModelCapabilities
from mlx_server.utils.memory import process_rss_bytes

MB = 1024**2


def _size(smollm_dir: Path) -> int:
    """The pool's estimate: the files, or their float32 size where the CPU loads them so."""
    return loaded_bytes_estimate(smollm_dir, read_config(smollm_dir))


def _pool(budget: int, max_models: int = 4) -> ModelPoolManager:
    return ModelPoolManager(budget_bytes=budget, max_models=max_models, idle_ttl_seconds=0)


def test_budget_for_one_model_evicts_the_least_recently_used(
    two_models: tuple[str, str], smollm_dir: Path
) -> None:
    a, b = two_models
    pool = _pool(int(_size(smollm_dir) * 1.5))

    async def main() -> list[list[str]]:
        seen = []
        async with pool.lease(a):
            seen.append([m["id"] for m in pool.status()["models"]])
        async with pool.lease(b):
            seen.append([m["id"] for m in pool.status()["models"]])
        return seen

    assert asyncio.run(main()) == [[a], [b]]


def test_pinned_model_is_never_evicted(two_models: tuple[str, str], smollm_dir: Path) -> None:
    a, b = two_models
    pool = _pool(int(_size(smollm_dir) * 1.5))

    async def main() -> None:
        await pool.preload(a, pin=True)
        with pytest.raises(APIError) as caught:
            await pool.acquire(b)
        assert caught.value.status == 507
        assert "unpin" in caught.value.message
        assert [m["id"] for m in pool.status()["models"]] == [a]
        pool.set_pinned(a, False)
        async with pool.lease(b):
            assert [m["id"] for m in pool.status()["models"]] == [b]

    asyncio.run(main())


def test_max_models_bounds_the_count(two_models: tuple[str, str]) -> None:
    a, b = two_models
    pool = _pool(budget=10**12, max_models=1)

    async def main() -> list[str]:
        await pool.preload(a, pin=False)
        await pool.preload(b, pin=False)
        return [m["id"] for m in pool.status()["models"]]

    assert asyncio.run(main()) == [b]


def test_a_busy_model_is_not_evicted_and_the_client_is_told_to_retry(
    two_models: tuple[str, str], smollm_dir: Path
) -> None:
    a, b = two_models
    pool = _pool(int(_size(smollm_dir) * 1.5))

    async def main() -> None:
        async with pool.lease(a):
            with pytest.raises(APIError) as caught:
                await pool.acquire(b)
            assert caught.value.status == 503
            assert caught.value.headers == {"Retry-After": "5"}

    asyncio.run(main())


def test_a_model_larger_than_the_budget_is_refused_before_loading(two_models: tuple[str, str]) -> None:
    pool = _pool(budget=10 * MB)
    with pytest.raises(APIError) as caught:
        asyncio.run(pool.acquire(two_models[0]))
    assert caught.value.status == 507
    assert "MLX_SERVER_MAX_MEMORY_GB" in caught.value.message
    assert pool.status()["models"] == [] and pool.load_count == 0


def test_unload_gives_the_memory_back(two_models: tuple[str, str], smollm_dir: Path) -> None:
    a = two_models[0]
    pool = _pool(int(_size(smollm_dir) * 1.5))
    gc.collect()
    mx.clear_cache()
    before_active, before_rss = mx.get_active_memory(), process_rss_bytes()

    async def main() -> tuple[int, int]:
        loaded = await pool.preload(a, pin=False)
        size = loaded.size_bytes
        del loaded
        loaded_active = mx.get_active_memory()
        await pool.unload(a)
        return size, loaded_active

    size, loaded_active = asyncio.run(main())
    after_active, after_rss = mx.get_active_memory(), process_rss_bytes()
    print(f"active {before_active / MB:.1f} -> {loaded_active / MB:.1f} -> {after_active / MB:.1f} MiB")
    print(f"rss {before_rss / MB:.1f} -> {after_rss / MB:.1f} MiB (model {size / MB:.1f} MiB)")
    assert loaded_active - before_active > 0.9 * _size(smollm_dir)
    assert abs(after_active - before_active) <= 0.1 * size
    assert after_rss <= before_rss * 1.1


def test_a_replacement_loads_only_after_the_old_model_is_freed(
    two_models: tuple[str, str], smollm_dir: Path
) -> None:
    a, b = two_models
    pool = _pool(int(_size(smollm_dir) * 1.5))

    async def main() -> int:
        await pool.preload(a, pin=False)
        mx.reset_peak_memory()
        await pool.preload(b, pin=False)
        return int(mx.get_peak_memory())

    baseline = mx.get_active_memory()
    peak = asyncio.run(main())
    # Never both models at once: the peak stays well under two models' worth.
    assert peak - baseline < 1.5 * _size(smollm_dir)


def test_ten_simultaneous_first_requests_load_the_model_once(two_models: tuple[str, str]) -> None:
    pool = _pool(budget=10**12)

    async def main() -> set[int]:
        loaded = await asyncio.gather(*(pool.acquire(two_models[0]) for _ in range(10)))
        assert all(m.active == 10 for m in loaded)
        for m in loaded:
            pool.release(m)
        return {id(m) for m in loaded}

    assert len(asyncio.run(main())) == 1
    assert pool.load_count == 1


def test_idle_models_are_unloaded_after_the_ttl_unless_pinned(two_models: tuple[str, str]) -> None:
    a, b = two_models
    pool = ModelPoolManager(budget_bytes=10**12, max_models=4, idle_ttl_seconds=0.2)

    async def main() -> list[str]:
        await pool.preload(a, pin=True)
        await pool.preload(b, pin=False)
        assert await pool.evict_idle() == []  # both used just now
        await asyncio.sleep(0.3)
        assert await pool.evict_idle() == [b]
        return [m["id"] for m in pool.status()["models"]]

    assert asyncio.run(main()) == [a]


def test_probed_capabilities_choose_the_adapter_else_detection(two_models: tuple[str, str]) -> None:
    a, b = two_models
    with Session(get_engine()) as session:
        session.add(ModelCapabilities(model_id=a, model_type="text-gen", model_family="qwen"))
        session.commit()
    pool = get_model_pool()

    async def main() -> tuple[str, str, bool, bool]:
        async with pool.lease(a) as probed, pool.lease(b) as unprobed:
            return probed.adapter.family, unprobed.adapter.family, probed.probed, unprobed.probed

    # SmolLM2 has llama weights but a ChatML template: detection says "default", not "llama".
    assert asyncio.run(main()) == ("qwen", "default", True, False)


def test_unknown_model_is_a_404(home: Path) -> None:
    upgrade_database()
    with pytest.raises(APIError) as caught:
        asyncio.run(_pool(10**12).acquire("nope"))
    assert caught.value.status == 404
