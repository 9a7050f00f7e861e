"""A body with no Content-Type is read as JSON only from programs: Chromium itself sends a
page's typeless body (a no-cors fetch of a Blob) with Origin and Sec-Fetch-*, so another
site's page is refused (403) and even the dashboard's own origin gets 415, never a generation."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import httpx
from playwright.sync_api import Route, sync_playwright

from tests.browser.support import CHROMIUM_ARGS

# A page of another origin (served by the route below; nothing listens on port 9).
OTHER_SITE = "http://localhost:9/"
# Chromium's own Local Network Access check would stop the cross-site request before it left;
# off, so that what reaches the server is what an older or another browser would send.
LOOPBACK_CHECKS_OFF = (
    "--disable-features=LocalNetworkAccessChecks,PrivateNetworkAccessSendPreflights,"
    "PrivateNetworkAccessRespectPreflightResults,BlockInsecurePrivateNetworkRequests"
)
SEND = """async ([url, body]) => {
  for (const type of [undefined, "text/plain"]) {
    const blob = type ? new Blob([body], {type}) : new Blob([body]);
    try { await fetch(url, {method: "POST", mode: "no-cors", body: blob}); } catch (e) {}
  }
}"""
BODY = json.dumps({"model": "no-such-model", "messages": [{"role": "user", "content": "hi"}]})


def _rows(live_server: str, path: str, count: int) -> list[dict[str, Any]]:
    deadline = time.monotonic() + 10
    while True:
        query = {"endpoint": f"POST {path}", "limit": 10}
        rows: list[dict[str, Any]] = httpx.get(f"{live_server}/v1/admin/audit", params=query).json()["data"]
        if len(rows) >= count or time.monotonic() > deadline:
            return rows
        time.sleep(0.1)


def test_a_pages_typeless_body_is_refused(live_server: str, chromium: Path) -> None:
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=str(chromium), args=[*CHROMIUM_ARGS, LOOPBACK_CHECKS_OFF]
        )
        page = browser.new_page()

        def other_site(route: Route) -> None:
            route.fulfill(status=200, content_type="text/html", body="<p>another site</p>")

        page.route(f"{OTHER_SITE}**", other_site)
        page.goto(OTHER_SITE)
        page.evaluate(SEND, [f"{live_server}/api/chat", BODY])
        page.goto(f"{live_server}/health")  # the server's own origin
        page.evaluate(SEND, [f"{live_server}/v1/chat/completions", BODY])
        browser.close()
    cross_site = _rows(live_server, "/api/chat", 2)
    assert sorted(row["status"] for row in cross_site) == [403, 403]
    same_origin = _rows(live_server, "/v1/chat/completions", 2)
    assert sorted(row["status"] for row in same_origin) == [415, 415]
