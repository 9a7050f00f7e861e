"""Two model types behind one pool: SmolLM2 (text) and all-MiniLM-L6-v2 (embeddings), both real."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import mlx.core as mx
import pytest
from sqlmodel import Session

from mlx_server.database import get_engine, upgrade_database
from mlx_server.errors import APIError
from mlx_server.models.cpu_weights import loaded_bytes_estimate
from mlx_server.models.detection import ModelType, read_config
from mlx_server.models.pool import ModelPoolManager, reset_model_pool
from mlx_server.models.store import default_embedding_model_dir
from mlx_server.records import ModelRecord, ModelSource
from mlx_server.utils.metal import reset_metal_thread

CHAT, EMBED = "smol", "minilm"


@pytest.fixture
def sizes(home: Path, smollm_dir: Path) -> Iterator[dict[str, int]]:
    """Both models registered; yields the pool's estimates of their sizes."""
    upgrade_database()
    paths = {CHAT: smollm_dir, EMBED: default_embedding_model_dir()}
    with Session(get_engine()) as session:
        for model_id, path in paths.items():
            session.add(ModelRecord(id=model_id, source=ModelSource.LOCAL, path=str(path)))
        session.commit()
    yield {m: loaded_bytes_estimate(p, read_config(p)) for m, p in paths.items()}
    reset_model_pool()
    reset_metal_thread()


def _pool(budget: int) -> ModelPoolManager:
    return ModelPoolManager(budget_bytes=budget, max_models=4, idle_ttl_seconds=0)


def _loaded(pool: ModelPoolManager) -> list[tuple[str, str]]:
    return [(m["id"], m["type"]) for m in pool.status()["models"]]


def test_a_chat_and_an_embedding_model_share_a_budget_that_fits_both(sizes: dict[str, int]) -> None:
    pool = _pool(int(sum(sizes.values()) * 1.5))

    async def main() -> list[tuple[str, str]]:
        chat = await pool.acquire(CHAT, ModelType.TEXT_GEN)
        embed = await pool.acquire(EMBED, ModelType.EMBEDDINGS)
        assert chat.adapter is not None and embed.adapter is None and embed.embedding is not None
        pool.release(chat)
        pool.release(embed)
        return _loaded(pool)

    assert asyncio.run(main()) == [(EMBED, "embeddings"), (CHAT, "text-gen")]
    assert pool.used_bytes <= pool.budget_bytes


def test_with_a_budget_for_one_the_other_type_evicts_it_unless_pinned(sizes: dict[str, int]) -> None:
    pool = _pool(max(sizes.values()) + min(sizes.values()) // 2)

    async def main() -> None:
        async with pool.lease(CHAT):
            pass
        await pool.acquire(EMBED, ModelType.EMBEDDINGS)
        assert _loaded(pool) == [(EMBED, "embeddings")]
        pool.release(pool.set_pinned(EMBED, True))
        with pytest.raises(APIError, match="Pinned models fill the pool") as caught:
            await pool.acquire(CHAT, ModelType.TEXT_GEN)
        assert caught.value.code == "pool_full"
        pool.set_pinned(EMBED, False)
        async with pool.lease(CHAT):
            assert _loaded(pool) == [(CHAT, "text-gen")]

    asyncio.run(main())


def test_the_wrong_type_is_refused_before_anything_loads(sizes: dict[str, int]) -> None:
    pool = _pool(int(sum(sizes.values()) * 1.5))
    with pytest.raises(APIError, match="'minilm' is of type embeddings; use /v1/embeddings") as caught:
        asyncio.run(pool.acquire(EMBED, ModelType.TEXT_GEN))
    assert caught.value.status == 400 and caught.value.code == "wrong_model_type"
    assert pool.load_count == 0


def test_unloading_the_embedding_model_frees_its_memory(sizes: dict[str, int]) -> None:
    pool = _pool(int(sum(sizes.values()) * 1.5))
    before = mx.get_active_memory()

    async def main() -> int:
        async with pool.lease(EMBED) as loaded:
            size = loaded.size_bytes
        await pool.unload(EMBED)
        return size

    size = asyncio.run(main())
    assert size > 0.9 * sizes[EMBED]
    assert mx.get_active_memory() - before < 0.05 * size
