"""The admin pool API: status, load (pin), unpin, unload, and its refusals."""

from __future__ import annotations

import httpx

from mlx_server.models.store import DEFAULT_MODEL_ID
from tests.support import ServerProcess


def test_load_pin_unload_through_the_admin_api(inference_server: ServerProcess) -> None:
    admin = httpx.Client(base_url=f"{inference_server.url}/v1/admin", timeout=60)
    # The server is shared: start from an empty pool (other tests load the embedding model too).
    for model in admin.get("/pool").json()["models"]:
        admin.post(f"/models/{model['id']}/unpin")
        assert admin.post(f"/models/{model['id']}/unload").status_code == 200

    loaded = admin.post(f"/models/{DEFAULT_MODEL_ID}/load").json()
    assert loaded["id"] == DEFAULT_MODEL_ID and loaded["pinned"] is True and loaded["size_bytes"] > 50 * 2**20

    pool = admin.get("/pool").json()
    assert [m["id"] for m in pool["models"]] == [DEFAULT_MODEL_ID]
    # Weights plus the prefix cache of earlier requests in this session's server.
    assert pool["used_bytes"] == loaded["size_bytes"] + pool["prompt_cache_bytes"] <= pool["budget_bytes"]
    assert pool["prompt_cache_bytes"] == pool["models"][0]["prompt_cache"]["bytes"]
    assert pool["mlx_active_memory_bytes"] >= loaded["size_bytes"] * 0.9

    assert admin.post(f"/models/{DEFAULT_MODEL_ID}/unpin").json()["pinned"] is False
    assert admin.post(f"/models/{DEFAULT_MODEL_ID}/unload").json() == {
        "id": DEFAULT_MODEL_ID,
        "unloaded": True,
    }
    after = admin.get("/pool").json()
    assert after["models"] == [] and after["used_bytes"] == 0
    assert after["mlx_active_memory_bytes"] < loaded["size_bytes"] * 0.1

    again = admin.post(f"/models/{DEFAULT_MODEL_ID}/unload")
    assert again.status_code == 409 and again.json()["error"]["code"] == "model_not_loaded"
    missing = admin.post("/models/org/no-such-model/load")
    assert missing.status_code == 404 and missing.json()["error"]["param"] == "model"
