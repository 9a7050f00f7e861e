"""The Cluster page's sharded models: "Serve across nodes" shows the plan before anything starts
(SmolLM2's 9 heads refused for 2-way tensor parallelism with the reason, accepted in 3 with each
share against the budget), then the plan's Start serves the tiny 4-head llama from two real rank
processes on this machine, listed as ready, and Stop ends them."""

from __future__ import annotations

from pathlib import Path

from fastapi.testclient import TestClient
from sqlmodel import Session

from mlx_server.database import get_engine
from mlx_server.records import ClusterNode, ModelRecord, ModelSource
from tests.support import csrf_headers, free_port


def _register(models: dict[str, Path]) -> None:
    with Session(get_engine()) as session:
        for model_id, path in models.items():
            session.add(ModelRecord(id=model_id, source=ModelSource.LOCAL, path=str(path)))
        session.commit()


def test_the_plan_comes_first_and_a_refusal_says_why(client: TestClient, smollm_dir: Path) -> None:
    _register({"smol": smollm_dir})
    headers = csrf_headers(client)
    assert "No model is sharded." in client.get("/cluster").text

    form = {"model": "smol", "ranks": "2", "strategy": "tensor"}
    refused = client.post("/cluster/sharded/plan", data=form, headers=headers)
    assert refused.status_code == 200 and "It cannot be served this way: tensor parallelism: " in refused.text
    assert "9 attention heads do not split into 2 ranks; 3 ranks would" in refused.text
    assert 'action="/cluster/sharded"' not in refused.text  # no Start for a refused plan

    planned = client.post("/cluster/sharded/plan", data={**form, "ranks": "3"}, headers=headers)
    plan = planned.text.split('data-testid="plan"')[1]
    assert "tensor parallel; each rank holds" in plan and plan.count("<td>fits</td>") == 1
    assert "<td>0, 1, 2</td>" in plan and 'action="/cluster/sharded"' in plan  # three ranks here
    too_many = client.post("/cluster/sharded/plan", data={**form, "ranks": "99"}, headers=headers)
    assert too_many.status_code == 422
    huge = client.post("/cluster/sharded/plan", data={**form, "model": "m" * 100_000}, headers=headers)
    assert huge.status_code == 422 and "string_too_long" in huge.text  # refused before any lookup


def test_the_plan_across_a_node_asks_it_and_says_why_not(client: TestClient, smollm_dir: Path) -> None:
    _register({"smol": smollm_dir})
    with Session(get_engine()) as session:
        session.add(ClusterNode(name="mac2", url=f"http://127.0.0.1:{free_port()}", api_key="k"))
        session.commit()
    headers = csrf_headers(client)
    page = client.get("/cluster").text
    # Once: the sections are not repeated inside <title>.
    assert page.count('data-testid="plan-nodes"') == 1 and page.count('id="serve-title"') == 1
    form = {"model": "smol", "strategy": "pipeline", "nodes": ["mac2"]}
    planned = client.post("/cluster/sharded/plan", data=form, headers=headers)
    plan = planned.text.split('data-testid="plan"')[1]
    assert "node &#39;mac2&#39; cannot be reached" in plan and "<td>mac2</td><td>1</td>" in plan
    assert "<td>127.0.0.1</td><td>0</td>" in plan and 'action="/cluster/sharded"' not in plan
    too_many = client.post("/cluster/sharded/plan", data={**form, "nodes": ["mac2"] * 16}, headers=headers)
    long_name = client.post("/cluster/sharded/plan", data={**form, "nodes": ["m" * 65]}, headers=headers)
    assert too_many.status_code == long_name.status_code == 422


def test_a_planned_model_starts_from_the_page_and_stops(
    client: TestClient, tiny_draft_dirs: dict[str, Path]
) -> None:
    _register({"tiny": tiny_draft_dirs["tiny"]})
    headers = csrf_headers(client)
    form = {"model": "tiny", "ranks": "2", "strategy": "auto"}
    planned = client.post("/cluster/sharded/plan", data=form, headers=headers)
    assert 'name="strategy" value="tensor"' in planned.text  # auto chose tensor parallelism

    started = client.post("/cluster/sharded", data={**form, "strategy": "tensor"}, headers=headers)
    assert "tiny is served by 2 ranks (tensor parallel)." in started.text, started.text[-2000:]
    assert 'data-testid="sharded-state-tiny">ready' in started.text
    listed = {m["id"]: m for m in client.get("/v1/models").json()["data"]}
    assert listed["tiny"]["sharded"]["ranks"] == 2  # /v1/models marks it sharded

    again = client.post("/cluster/sharded", data=form, headers=headers)
    assert again.status_code == 400 and "is sharded already" in again.text
    stopped = client.post("/cluster/sharded/stop", data={"model": "tiny"}, headers=headers)
    assert "tiny stopped; its ranks ended." in stopped.text and "No model is sharded." in stopped.text
    unknown = client.post("/cluster/sharded/restart", data={"model": "tiny"}, headers=headers)
    assert unknown.status_code == 400 and "is not sharded" in unknown.text
