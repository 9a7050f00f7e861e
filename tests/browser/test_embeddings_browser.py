"""Embeddings in a real browser: the models page shows both models with their types, "Try" opens
the Embeddings panel, and three texts give a similarity table (real all-MiniLM-L6-v2)."""

from __future__ import annotations

from pathlib import Path

import pytest
from playwright.sync_api import expect
from sqlmodel import Session

from mlx_server.database import get_engine
from mlx_server.models.store import default_embedding_model_dir
from mlx_server.records import ModelRecord, ModelSource
from tests.browser.support import SECONDS, browse, screenshot


@pytest.mark.browser
def test_models_page_types_and_the_embeddings_panel_similarity_table(
    live_server: str, chromium: Path, smollm_dir: Path
) -> None:
    with Session(get_engine()) as session:
        session.add(ModelRecord(id="smol", source=ModelSource.LOCAL, path=str(smollm_dir)))
        session.add(
            ModelRecord(id="minilm", source=ModelSource.LOCAL, path=str(default_embedding_model_dir()))
        )
        session.commit()

    with browse(live_server, chromium) as page:
        page.goto(live_server + "/models")
        for model_id, model_type in (("smol", "text-gen"), ("minilm", "embeddings")):
            row = page.locator(f'tr.model-row[data-model-id="{model_id}"]')
            expect(row.get_by_test_id("model-type")).to_have_text(model_type)
        expect(
            page.locator('tr.model-row[data-model-id="smol"]').get_by_role("link", name="Try")
        ).to_have_count(0)

        page.locator('tr.model-row[data-model-id="minilm"]').get_by_role("link", name="Try").click()
        page.wait_for_url(live_server + "/embeddings?model=minilm")
        expect(page.get_by_label("Model")).to_have_value("minilm")
        page.get_by_role("button", name="Compare").click()  # the three example texts

        table = page.get_by_test_id("similarity-table")
        expect(table.locator("tbody tr")).to_have_count(3, timeout=60 * SECONDS)
        expect(page.get_by_test_id("embeddings-stats")).to_contain_text("minilm · 384 dimensions")
        values = [float(v) for v in table.locator("td.heat").all_inner_texts()]
        assert values[0] == values[4] == values[8] == 1.0
        assert values[1] > values[2]  # cat/kitten above cat/stock market
        screenshot(page, "embeddings.png")
