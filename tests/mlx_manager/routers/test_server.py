"""The server page: pool status, limits stored and applied live, unload all; the header indicator."""

from __future__ import annotations

from pathlib import Path

from fastapi.testclient import TestClient

from mlx_server.models.pool import get_model_pool
from mlx_server.utils.memory import GB
from tests.support import csrf_headers


def test_limits_are_validated_stored_and_applied_live(page: TestClient) -> None:
    bad = page.post("/server/limits", data={"max_memory_gb": 0, "max_models": 2, "idle_ttl_seconds": 60})
    assert bad.status_code == 400 and "memory budget must be between" in bad.text
    saved = page.post(
        "/server/limits",
        data={"max_memory_gb": 1.5, "max_models": 2, "idle_ttl_seconds": 90},
        follow_redirects=False,
    )
    assert saved.status_code == 303
    pool = get_model_pool()
    assert (pool.budget_bytes, pool.max_models, pool.idle_ttl_seconds) == (int(1.5 * GB), 2, 90.0)
    html = page.get("/server").text
    assert 'value="1.5"' in html and "override the environment" in html


def test_limits_survive_a_restart(home: Path, smollm_dir: Path) -> None:
    from mlx_manager.main import create_app

    with TestClient(create_app()) as client:
        client.post(
            "/server/limits",
            headers=csrf_headers(client),
            data={"max_memory_gb": 2, "max_models": 3, "idle_ttl_seconds": 0},
        )
    with TestClient(create_app()):
        pool = get_model_pool()
        assert (pool.budget_bytes, pool.max_models, pool.idle_ttl_seconds) == (2 * GB, 3, 0.0)
    with TestClient(create_app()) as client:
        client.post("/server/limits/reset", headers=csrf_headers(client))
        assert get_model_pool().max_models == 4  # MLX_SERVER_MAX_MODELS' default


def test_pool_table_indicator_and_unload_all(page: TestClient) -> None:
    page.post("/models/smol/load", headers={"HX-Request": "true"})
    html = page.get("/server").text
    assert 'class="pool-row" data-model-id="smol"' in html
    assert 'data-testid="prompt-cache">0 entries, 0 B of 512.0 MiB' in html  # nothing generated yet
    assert "(bound 512.0 MiB)" in html  # all models' caches together (MLX_SERVER_PROMPT_CACHE_MB)
    assert 'data-testid="batch">0 running, 0 prefilling, 0 queued; batch size 8' in html  # idle, the default
    assert 'data-testid="queue-depth">0 / 32' in html and "chunks of 256 tokens" in html
    indicator = page.get("/server/indicator").text
    assert "1 loaded" in indicator
    done = page.post("/server/unload-all", headers={"HX-Request": "true"})
    assert "Unloaded 1 model." in done.text and get_model_pool().get_loaded("smol") is None
    assert "0 loaded" in page.get("/").text  # every page's header shows the pool
