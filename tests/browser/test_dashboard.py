"""The dashboard in a real browser (Playwright driving Debian's chromium)."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlmodel import Session

from mlx_server.database import get_engine
from mlx_server.records import ModelRecord, ModelSource
from tests.browser.support import browse


@pytest.mark.browser
def test_dashboard_navigates_to_models_without_errors_or_outside_requests(
    live_server: str, chromium: Path, tmp_path: Path
) -> None:
    with Session(get_engine()) as session:
        session.add(ModelRecord(id="browser-model", source=ModelSource.LOCAL, path="/m", size_bytes=2**20))
        session.commit()

    with browse(live_server, chromium) as page:
        page.goto(live_server + "/")
        assert page.title() == "Dashboard · MLX Manager"
        assert page.get_by_test_id("model-count").inner_text() == "1"
        assert page.evaluate("() => window.htmx.version").startswith("2.")

        page.get_by_role("link", name="Models", exact=True).click()
        page.wait_for_url(live_server + "/models")
        assert page.get_by_role("cell", name="browser-model").is_visible()
        assert page.locator('nav a[aria-current="page"]').inner_text() == "Models"
        page.screenshot(path=str(tmp_path / "models.png"))
