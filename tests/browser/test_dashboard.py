"""The dashboard in a real browser (Playwright driving Debian's chromium)."""

from __future__ import annotations

from pathlib import Path

import pytest
from playwright.sync_api import sync_playwright
from sqlmodel import Session

from mlx_server.database import get_engine
from mlx_server.records import ModelRecord, ModelSource

CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


@pytest.mark.browser
def test_dashboard_navigates_to_models_without_errors_or_outside_requests(
    live_server: str, chromium: Path, tmp_path: Path
) -> None:
    with Session(get_engine()) as session:
        session.add(ModelRecord(id="browser-model", source=ModelSource.LOCAL, path="/m", size_bytes=2**20))
        session.commit()

    errors: list[str] = []
    outside: list[str] = []
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(chromium), args=CHROMIUM_ARGS)
        page = browser.new_page()
        page.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" else None)
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        page.on("request", lambda req: None if req.url.startswith(live_server) else outside.append(req.url))

        page.goto(live_server + "/")
        assert page.title() == "Dashboard · MLX Manager"
        assert page.get_by_test_id("model-count").inner_text() == "1"
        assert page.evaluate("() => window.htmx.version").startswith("2.")

        page.get_by_role("link", name="Models", exact=True).click()
        page.wait_for_url(live_server + "/models")
        assert page.get_by_role("cell", name="browser-model").is_visible()
        assert page.locator('nav a[aria-current="page"]').inner_text() == "Models"
        page.screenshot(path=str(tmp_path / "models.png"))
        browser.close()

    assert errors == []
    assert outside == []
