"""Models found on this machine, in a real browser: the models page lists a Hugging Face cache's
MLX model as addable and a transformers checkpoint as "not an MLX model: convert", and one click
adds the first where it is."""

from __future__ import annotations

from pathlib import Path

import pytest
from playwright.sync_api import expect
from sqlmodel import Session

from mlx_manager.services.settings_store import HUB_CACHE_DIR, set_setting
from mlx_server.database import get_engine
from mlx_server.models.store import get_model
from mlx_server.records import ModelSource
from tests.browser.support import SECONDS, browse
from tests.fixtures.disk_models import hub_cache_repo, write_tiny_checkpoint

MLX_REPO = "mlx-community/SmolLM2-135M-Instruct-4bit"


@pytest.mark.browser
def test_one_click_adds_a_model_found_in_the_hub_cache(
    live_server: str, chromium: Path, smollm_dir: Path, tmp_path: Path
) -> None:
    cache = tmp_path / "hf-cache"
    snapshot = hub_cache_repo(cache, MLX_REPO, smollm_dir)
    checkpoint = hub_cache_repo(cache, "someone/tiny-checkpoint", write_tiny_checkpoint(tmp_path / "ckpt"))
    with Session(get_engine()) as session:
        set_setting(session, HUB_CACHE_DIR, str(cache))

    with browse(live_server, chromium) as page:
        page.goto(live_server + "/models")
        found = page.get_by_test_id("discovered")
        expect(found).to_be_visible(timeout=20 * SECONDS)  # loaded after the page
        converting = found.locator(f'tr[data-path="{checkpoint}"]')
        expect(converting.get_by_test_id("discovered-status")).to_contain_text("not an MLX model: convert")
        expect(converting.get_by_test_id("discovered-status")).to_contain_text("a Hugging Face checkpoint")
        expect(converting.get_by_role("link", name="Convert…")).to_be_visible()

        row = found.locator(f'tr[data-path="{snapshot}"]')
        expect(row.get_by_test_id("discovered-status")).to_contain_text("addable")
        row.get_by_role("button", name="Add").click()
        expect(page.get_by_test_id("discovered-added")).to_contain_text(f"Added {MLX_REPO}")
        expect(page.get_by_test_id("discovered-added")).to_contain_text("nothing was copied")

    with Session(get_engine()) as session:
        record = get_model(session, MLX_REPO)
    assert record is not None and record.source == ModelSource.IN_PLACE and Path(record.path) == snapshot
