"""The Keys page and the login in a real browser: a key is shown once and works, revoking it
refuses it at once; with the login required, the first visit sets the password, log out ends it.
(A wrong password is a 401, which Chromium logs as a console error: tests/mlx_manager/web/test_login.py.)"""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from playwright.sync_api import Dialog, expect

from tests.browser.support import browse


def test_a_key_made_on_the_keys_page_works_until_revoked(live_server: str, chromium: Path) -> None:
    with browse(live_server, chromium) as page:
        page.goto(f"{live_server}/models")
        page.get_by_role("navigation", name="Main").get_by_role("link", name="Keys", exact=True).click()
        page.wait_for_url(f"{live_server}/keys")
        page.get_by_label("Name").fill("browser agent")
        page.get_by_label("Scope").select_option("admin")
        page.get_by_role("button", name="Create").click()
        secret = page.locator('[data-testid="new-key"] code.secret-key').inner_text()
        assert secret.startswith("mlx-")
        assert (
            httpx.get(
                f"{live_server}/v1/admin/pool", headers={"Authorization": f"Bearer {secret}"}
            ).status_code
            == 200
        )
        assert httpx.get(f"{live_server}/v1/models").status_code == 401

        page.reload()
        row = page.locator('tr[data-key="browser agent"]')
        expect(row).to_contain_text(secret[:12])
        assert secret not in page.content()

        confirmed: list[str] = []

        def accept(dialog: Dialog) -> None:
            confirmed.append(dialog.message)
            dialog.accept()

        page.once("dialog", accept)
        row.get_by_role("button", name="Revoke").click()
        expect(row.locator("td").nth(3)).to_have_text("revoked")
        assert confirmed == ["Revoke the key browser agent? Clients using it get 401 at once."]
        assert httpx.get(f"{live_server}/v1/models", headers={"x-api-key": secret}).status_code == 401


@pytest.fixture
def login_required(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MLX_MANAGER_REQUIRE_LOGIN", "true")


def test_first_visit_sets_the_password_and_log_out_ends_the_session(
    login_required: None, live_server: str, chromium: Path
) -> None:
    with browse(live_server, chromium) as page:
        page.goto(f"{live_server}/audit")
        page.wait_for_url(f"{live_server}/login?next=/audit")
        expect(page.get_by_role("heading", name="Set the admin password")).to_be_visible()
        page.get_by_label("Password", exact=True).fill("a browser password")
        page.get_by_label("Again", exact=True).fill("a browser password")
        page.get_by_role("button", name="Set password and log in").click()
        page.wait_for_url(f"{live_server}/audit")
        cookie = next(c for c in page.context.cookies() if c["name"] == "mlx_session")
        assert cookie["httpOnly"] and cookie["sameSite"] == "Lax" and cookie["expires"] > 0

        page.get_by_role("button", name="Log out").click()
        page.wait_for_url(f"{live_server}/login")
        page.goto(f"{live_server}/settings")
        page.wait_for_url(f"{live_server}/login?next=/settings")
        assert page.get_by_role("navigation", name="Main").count() == 0  # nor the pool indicator
        page.get_by_label("Admin password").fill("a browser password")
        page.get_by_role("button", name="Log in").click()
        page.wait_for_url(f"{live_server}/settings")
