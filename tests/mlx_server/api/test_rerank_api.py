"""POST /v1/rerank and /rerank: a tiny random cross-encoder (mlx-embeddings' BERT under our
head) checks the plumbing; all-MiniLM-L6-v2 ranks by cosine, labelled as such; the reranker
is its own model type, detected, probed and refused by the other endpoints by name."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from mlx_server.models.detection import ModelType, detect_model_type
from mlx_server.models.store import default_embedding_model_dir
from mlx_server.services.operations.probe import probe_model
from mlx_server.services.operations.probe_steps import ProbeStep
from tests.fixtures.tiny_cross_encoder import build_tiny_cross_encoder
from tests.mlx_server.api.conftest import standalone_server

QUERY = "a cat naps"
DOCUMENTS = ["stock markets fell", "a kitten sleeps"]


@pytest.fixture(scope="module")
def tiny_reranker_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_cross_encoder(
        tmp_path_factory.mktemp("models") / "tiny-reranker", default_embedding_model_dir()
    )


@pytest.fixture
def server(home: Path, tiny_reranker_dir: Path) -> Iterator[TestClient]:
    with standalone_server({"rr": tiny_reranker_dir, "minilm": default_embedding_model_dir()}) as client:
        yield client


def test_a_reranker_is_its_own_model_type(tiny_reranker_dir: Path) -> None:
    assert detect_model_type(tiny_reranker_dir) is ModelType.RERANK
    assert detect_model_type(default_embedding_model_dir()) is ModelType.EMBEDDINGS


def test_a_cross_encoder_ranks_in_the_cohere_shape(server: TestClient) -> None:
    long_document = "the quick brown fox jumps over the lazy dog " * 20
    documents = [*DOCUMENTS, {"text": long_document}]
    body = {"model": "rr", "query": QUERY, "documents": documents, "return_documents": True}
    response = server.post("/v1/rerank", json=body)
    assert response.status_code == 200, response.text
    ranked = response.json()
    assert set(ranked) == {"id", "model", "results", "usage", "meta"} and ranked["model"] == "rr"
    assert ranked["meta"]["method"] == "cross-encoder"
    results = ranked["results"]
    assert sorted(r["index"] for r in results) == [0, 1, 2]
    scores = [r["relevance_score"] for r in results]
    assert scores == sorted(scores, reverse=True) and all(0.0 < s < 1.0 for s in scores)
    texts = [DOCUMENTS[0], DOCUMENTS[1], long_document]
    assert all(set(r) == {"index", "relevance_score", "document"} for r in results)
    assert all(r["document"]["text"] == texts[r["index"]] for r in results)
    assert ranked["usage"]["prompt_tokens"] == ranked["usage"]["total_tokens"] > 3 * 5
    # Padding and batching change nothing: each pair alone scores as it did beside the long one.
    by_index = {r["index"]: r["relevance_score"] for r in results}
    for index, document in enumerate(DOCUMENTS):
        alone = server.post("/rerank", json={"model": "rr", "query": QUERY, "documents": [document]}).json()
        assert alone["results"][0]["relevance_score"] == pytest.approx(by_index[index], abs=1e-5)
        assert "document" not in alone["results"][0]  # return_documents defaults to false
    top = server.post("/rerank", json={**body, "top_n": 1, "return_documents": False}).json()["results"]
    assert [(r["index"], r["relevance_score"]) for r in top] == [
        (results[0]["index"], pytest.approx(scores[0]))
    ]


def test_an_embedding_model_ranks_by_cosine_and_says_so(server: TestClient) -> None:
    ranked = server.post("/rerank", json={"model": "minilm", "query": QUERY, "documents": DOCUMENTS}).json()
    assert ranked["meta"]["method"] == "cosine"
    assert [r["index"] for r in ranked["results"]] == [1, 0]  # the kitten above the stock market
    kitten, stocks = (r["relevance_score"] for r in ranked["results"])
    assert kitten > 0.5 > stocks


def test_bad_requests_are_clear_400s_and_the_types_are_kept_apart(server: TestClient) -> None:
    bad = server.post("/v1/rerank", json={"model": "rr", "query": QUERY, "documents": [{"title": "x"}]})
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "documents[0]"
    empty = server.post("/v1/rerank", json={"model": "rr", "query": QUERY, "documents": []})
    assert empty.status_code == 400
    chat = server.post(
        "/v1/chat/completions", json={"model": "rr", "messages": [{"role": "user", "content": "hi"}]}
    )
    assert chat.status_code == 400 and "/v1/rerank" in chat.json()["error"]["message"]
    embed = server.post("/v1/embeddings", json={"model": "rr", "input": "hi"})
    assert embed.status_code == 400 and "/v1/rerank" in embed.json()["error"]["message"]


def test_the_probe_stores_a_reranker_as_such(server: TestClient) -> None:
    import asyncio

    steps: list[ProbeStep] = []
    capabilities = asyncio.run(probe_model("rr", on_step=steps.append))
    assert capabilities.model_type == "rerank" and capabilities.max_sequence_length == 512
    done = [(s.name, s.status) for s in steps if s.status != "running"]
    assert done == [("detect", "ok"), ("load", "ok"), ("rerank", "ok"), ("save", "ok"), ("unload", "ok")]
    assert "'a kitten sleeps'" in next(s.detail for s in steps if s.name == "rerank" and s.status == "ok")
