"""The Embeddings panel and the models page's types, with the real all-MiniLM-L6-v2 and SmolLM2."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlmodel import Session

from mlx_server.config import get_settings
from mlx_server.database import get_engine
from mlx_server.models.store import default_embedding_model_dir, import_directory
from mlx_server.records import ModelRecord, ModelSource

HTMX = {"HX-Request": "true"}
TEXTS = "A cat sits on the mat\nA kitten is resting on a rug\n\nStock markets fell sharply today\n"


@pytest.fixture
def panel(page: TestClient) -> TestClient:
    """The app with SmolLM2 ("smol") and all-MiniLM-L6-v2 ("minilm", never probed) registered."""
    with Session(get_engine()) as session:
        path = str(default_embedding_model_dir())
        session.add(ModelRecord(id="minilm", source=ModelSource.LOCAL, path=path, size_bytes=9 * 10**7))
        session.commit()
    return page


def _cells(html: str) -> list[float]:
    return [float(v) for v in re.findall(r'<td class="heat"[^>]*>(-?[0-9.]+)</td>', html)]


def test_the_panel_offers_only_embedding_models_with_example_texts(panel: TestClient) -> None:
    html = panel.get("/embeddings").text
    assert '<option value="minilm" selected>minilm</option>' in html and 'value="smol"' not in html
    assert "A kitten is resting on a rug" in html


def test_three_texts_give_a_similarity_table_with_model_dimensions_and_time(panel: TestClient) -> None:
    response = panel.post("/embeddings", data={"model": "minilm", "texts": TEXTS}, headers=HTMX)
    assert response.status_code == 200, response.text
    assert "<h1>" not in response.text  # htmx gets the result fragment only
    assert re.search(r"minilm · 384 dimensions · 24 tokens · \d+ ms", response.text)
    cells = _cells(response.text)
    matrix = [cells[0:3], cells[3:6], cells[6:9]]
    assert len(cells) == 9 and all(matrix[i][i] == 1.0 for i in range(3))
    assert matrix[0][1] == matrix[1][0] and matrix[0][1] > matrix[0][2] + 0.3


@pytest.mark.parametrize(
    ("model", "texts", "message"),
    [
        ("minilm", "only one text", "Enter between 2 and 16 texts, one per line (1 given)."),
        ("smol", TEXTS, "is of type text-gen; use /v1/chat/completions"),
        ("minilm", "short\n" + "word " * 300, "input[1] is 302 tokens"),
    ],
)
def test_refusals_say_what_to_change(panel: TestClient, model: str, texts: str, message: str) -> None:
    response = panel.post("/embeddings", data={"model": model, "texts": texts}, headers=HTMX)
    assert response.status_code == 400
    assert message in response.text.replace("&#39;", "'")


def test_models_page_shows_each_type_and_try_only_for_embeddings(panel: TestClient) -> None:
    html = panel.get("/models").text
    types = re.findall(r'data-model-id="([^"]+)".*?data-testid="model-type">([^<]+)<', html, re.S)
    assert sorted(types) == [("minilm", "embeddings"), ("smol", "text-gen")]
    assert html.count(">Try</a>") == 1 and 'href="/embeddings?model=minilm"' in html


def test_deleting_a_bundled_model_removes_its_copy_from_the_models_directory(page: TestClient) -> None:
    with Session(get_engine()) as session:
        record = import_directory(session, default_embedding_model_dir(), get_settings().models_dir, "mini")
    deleted = page.post("/models/mini/delete")
    assert "Deleted mini and its files" in deleted.text
    assert not Path(record.path).exists()


def test_chat_offers_only_the_models_it_can_chat_with(panel: TestClient) -> None:
    options = re.findall(r'<option value="([^"]+)"', panel.get("/chat").text)
    assert "smol" in options and "minilm" not in options
