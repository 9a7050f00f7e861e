"""A user's whole round in a real browser: find a model on the (local) hub, download it, watch
the auto-probe, pin / unpin / unload it, read the audit log after a chat request, delete it.

Writes the README's screenshots to docs/screenshots/ on the way.
"""

from __future__ import annotations

import re
import time
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import Dialog, Locator, Page, expect

from tests.browser.support import SECONDS, browse, screenshot
from tests.conftest import SMOLLM_REPO
from tests.hub_server import HubServer

MB = 1024 * 1024

# A download row that is running and neither empty nor full: an intermediate progress update.
INTERMEDIATE_PROGRESS = """repo => {
  const row = [...document.querySelectorAll('tr.download[data-status="running"]')]
    .find(tr => tr.textContent.includes(repo));
  const value = row && row.querySelector('progress') ? row.querySelector('progress').value : 0;
  return value > 0 && value < 100 ? value : null;
}"""


def _nav(page: Page, name: str, path: str, live_server: str) -> None:
    page.get_by_role("navigation", name="Main").get_by_role("link", name=name, exact=True).click()
    page.wait_for_url(live_server + path)


def _accept_next_dialog(page: Page, messages: list[str]) -> None:
    def accept(dialog: Dialog) -> None:
        messages.append(dialog.message)
        dialog.accept()

    page.once("dialog", accept)


def _model_row(page: Page) -> Locator:
    return page.locator(f'tr.model-row[data-model-id="{SMOLLM_REPO}"]')


def _search_and_download(page: Page, hub: HubServer) -> None:
    page.get_by_role("searchbox", name="Search").press_sequentially("SmolLM2")  # active search
    result = page.locator(f'tr.hub-model[data-repo-id="{SMOLLM_REPO}"]')
    expect(result).to_be_visible(timeout=15 * SECONDS)
    expect(result.locator(".badge")).to_have_text("fits")
    expect(result).to_contain_text("4-bit")

    # The weights take ~2 s: about eight progress updates (4 a second) reach the page.
    hub.throttle_bps = 60 * MB
    result.get_by_role("button", name="Download").click()
    download = page.locator("tr.download").filter(has_text=SMOLLM_REPO)
    expect(download).to_be_visible(timeout=5 * SECONDS)
    seen = page.wait_for_function(INTERMEDIATE_PROGRESS, arg=SMOLLM_REPO, timeout=15 * SECONDS)
    assert 0 < float(seen.json_value()) < 100
    expect(download).to_have_attribute("data-status", "completed", timeout=30 * SECONDS)
    expect(download.locator(".badge")).to_have_text("completed")
    expect(download.locator("progress")).to_have_attribute("value", "100.0")
    expect(download).to_contain_text(f"Registered as {SMOLLM_REPO}")
    expect(page.get_by_text("No downloads yet")).to_be_hidden()
    screenshot(page, "models.png")


def _watch_auto_probe(page: Page, live_server: str) -> None:
    """The models table is not live: the completed row's link reloads the page with the model."""
    page.locator("tr.download").get_by_role("link", name=SMOLLM_REPO).click()
    page.wait_for_url(live_server + "/models")
    expect(page.locator("main")).to_have_count(1)  # the page replaced, not swapped into the row
    row = _model_row(page)
    expect(row).to_be_visible(timeout=5 * SECONDS)
    expect(row).to_contain_text("probing…")  # the download's completion hook started the probe

    row.get_by_role("link", name=SMOLLM_REPO).click()
    page.wait_for_url(f"{live_server}/models/{SMOLLM_REPO}")
    panel = page.locator(".probe-panel")
    expect(panel.locator(".badge")).to_have_text("running")
    expect(panel.locator("li.probe-step").first).to_contain_text("detect: ok")  # steps stream in
    expect(panel.get_by_test_id("probe-done")).to_be_visible(timeout=60 * SECONDS)
    expect(panel.locator("li.probe-step")).to_have_count(8)
    expect(panel.locator('li.probe-step[data-step="save"]')).to_contain_text("save: ok")

    page.reload()  # the capabilities the probe stored, above its steps
    expect(page.get_by_text("Type / family")).to_be_visible()
    expect(page.get_by_test_id("practical-max-tokens")).to_have_text(re.compile(r"^\d+$"))
    expect(page.get_by_role("button", name="Re-probe")).to_be_enabled()
    screenshot(page, "model-detail.png")


def _pin_unpin_unload(page: Page, live_server: str) -> None:
    _nav(page, "Models", "/models", live_server)
    row = _model_row(page)
    state = row.get_by_test_id("model-state")
    expect(state).to_have_text("not loaded")
    expect(row).to_contain_text("probed ")

    row.get_by_role("button", name="Pin", exact=True).click()
    expect(state).to_have_text("loaded pinned", timeout=30 * SECONDS)
    expect(page.get_by_test_id("pool-indicator")).to_contain_text("1 loaded", timeout=10 * SECONDS)
    row.get_by_role("button", name="Unpin", exact=True).click()
    expect(state).to_have_text("loaded")
    expect(row.get_by_role("button", name="Delete")).to_be_disabled()  # unload it first
    row.get_by_role("button", name="Unload", exact=True).click()
    expect(state).to_have_text("not loaded", timeout=15 * SECONDS)
    expect(row.get_by_role("button", name="Load", exact=True)).to_be_visible()


def _wait_for_audit_row(live_server: str, model: str) -> None:
    """Audit rows are written by a background thread after the response: wait (bounded) until
    the row is committed, so the page loaded next can show it."""
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        rows = httpx.get(f"{live_server}/v1/admin/audit", params={"model": model}, timeout=10).json()
        if rows["total"]:
            return
        time.sleep(0.1)
    pytest.fail(f"no audit row for {model} within 15 s")


def _chat_then_audit(page: Page, live_server: str) -> None:
    """A chat request from outside the browser, as an API client makes it, then its audit row."""
    reply = httpx.post(
        f"{live_server}/v1/chat/completions",
        json={"model": SMOLLM_REPO, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4},
        timeout=60,
    )
    assert reply.status_code == 200, reply.text
    assert reply.json()["usage"]["completion_tokens"] <= 4
    _wait_for_audit_row(live_server, SMOLLM_REPO)

    _nav(page, "Audit log", "/audit", live_server)
    row = page.locator("tr.audit-row").filter(has_text=SMOLLM_REPO)
    expect(row).to_have_count(1)
    expect(row).to_contain_text("POST /v1/chat/completions")
    expect(row.locator(".status")).to_have_text("200")
    row.get_by_role("link").click()
    detail = page.locator("tr.audit-detail-row")
    expect(detail).to_contain_text("max_tokens", timeout=5 * SECONDS)
    expect(detail).to_contain_text(SMOLLM_REPO)
    screenshot(page, "audit.png")


def _server_unload_all(page: Page, live_server: str, dialogs: list[str]) -> None:
    _nav(page, "Server", "/server", live_server)
    expect(page.locator(f'tr.pool-row[data-model-id="{SMOLLM_REPO}"]')).to_be_visible()  # the chat loaded it
    expect(page.get_by_test_id("loaded-count")).to_contain_text("1 /")
    screenshot(page, "server.png")
    _accept_next_dialog(page, dialogs)
    page.get_by_role("button", name="Unload all").click()
    expect(page.get_by_role("status")).to_have_text("Unloaded 1 model.", timeout=15 * SECONDS)
    expect(page.get_by_text("No model is loaded")).to_be_visible()


def _delete(page: Page, live_server: str, dialogs: list[str]) -> None:
    _nav(page, "Models", "/models", live_server)
    row = _model_row(page)
    expect(row.get_by_test_id("model-state")).to_have_text("not loaded")
    _accept_next_dialog(page, dialogs)
    row.get_by_role("button", name="Delete").click()
    expect(row).to_have_count(0, timeout=10 * SECONDS)
    assert dialogs[-1] == f"Delete {SMOLLM_REPO}? This cannot be undone."

    page.reload()
    expect(page.get_by_test_id("disk-usage")).to_contain_text("0 models on disk")
    expect(page.get_by_text("No models yet")).to_be_visible()


@pytest.mark.browser
def test_user_downloads_probes_pins_audits_and_deletes_a_hub_model(
    hub: HubServer, hub_cache: Path, live_server: str, chromium: Path
) -> None:
    dialogs: list[str] = []
    with browse(live_server, chromium) as page:
        page.goto(live_server + "/")
        expect(page).to_have_title("Dashboard · MLX Manager")
        expect(page.get_by_test_id("model-count")).to_have_text("0")
        _nav(page, "Models", "/models", live_server)
        expect(page.get_by_text("No models yet")).to_be_visible()

        _search_and_download(page, hub)
        _watch_auto_probe(page, live_server)
        _pin_unpin_unload(page, live_server)
        _chat_then_audit(page, live_server)
        _server_unload_all(page, live_server, dialogs)

        page.get_by_role("link", name="MLX Manager").click()  # the brand leads home
        page.wait_for_url(live_server + "/")
        expect(page.get_by_test_id("model-count")).to_have_text("1")
        expect(page.get_by_text(SMOLLM_REPO)).to_be_visible()
        screenshot(page, "dashboard.png")

        _delete(page, live_server, dialogs)
        _nav(page, "Settings", "/settings", live_server)
        expect(page.get_by_role("heading", name="Settings", level=1)).to_be_visible()
        screenshot(page, "settings.png")
