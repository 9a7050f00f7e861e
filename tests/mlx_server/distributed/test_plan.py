"""The sharding plan through the admin API (the standalone app in this process; nothing is
loaded or started): SmolLM2's 9 heads refuse a 2-way tensor split with the reason and the
counts that would work; the tiny 4-head llama splits in two with each rank's weights; a
strategy mlx-lm lacks for the architecture is refused saying so."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.mlx_server.api.conftest import standalone_server


@pytest.fixture
def server(home: Path, smollm_dir: Path, tiny_draft_dirs: dict[str, Path]) -> Iterator[TestClient]:
    with standalone_server({"smol": smollm_dir, "tiny": tiny_draft_dirs["tiny"]}) as client:
        yield client


def _plan(server: TestClient, **body: Any) -> Any:
    return server.post("/v1/admin/sharded/plan", json=body)


def test_the_plan_refuses_smollm2_for_two_way_tensor_parallelism(server: TestClient) -> None:
    refused = _plan(server, model="smol", ranks=2, strategy="tensor")
    assert refused.status_code == 409
    message = refused.json()["error"]["message"]
    assert "9 attention heads do not split into 2 ranks; 3 ranks would" in message
    assert _plan(server, model="smol", ranks=3, strategy="tensor").json()["strategy"] == "tensor"

    plan = _plan(server, model="tiny", ranks=2).json()
    assert plan["strategy"] == "tensor" and plan["nodes"] == ["127.0.0.1", "127.0.0.1"]
    shared, *_ = plan["rank_bytes"]
    assert len(plan["rank_bytes"]) == 2 and shared > 0 and plan["shares"][0]["fits"]
    no_pipeline = _plan(server, model="tiny", ranks=2, strategy="pipeline")
    assert (
        no_pipeline.status_code == 409
        and "no pipeline split for llama" in no_pipeline.json()["error"]["message"]
    )
    assert _plan(server, model="tiny", ranks=1).status_code == 400
    assert _plan(server, model="ghost", ranks=2).status_code == 404
    assert server.get("/v1/admin/sharded").json() == {"object": "list", "data": []}
