"""What every browser test shares: Debian's chromium launched headless with nothing phoning
home, a page that records console errors and requests leaving the live server, screenshots."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from playwright.sync_api import Page, ViewportSize, sync_playwright

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
SCREENSHOTS = Path(__file__).resolve().parents[2] / "docs" / "screenshots"
VIEWPORT: ViewportSize = {"width": 1280, "height": 900}
SECONDS = 1000  # Playwright timeouts are in milliseconds


@contextmanager
def browse(live_server: str, chromium: Path, extra_args: Sequence[str] = ()) -> Iterator[Page]:
    """A page on the live server; after the block, no console error and no outside request.
    `extra_args` go to chromium after CHROMIUM_ARGS (a fake microphone, say)."""
    errors: list[str] = []
    outside: list[str] = []
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=str(chromium), args=[*CHROMIUM_ARGS, *extra_args]
        )
        page = browser.new_page(viewport=VIEWPORT)
        page.set_default_timeout(10 * SECONDS)
        page.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" else None)
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        # blob: URLs of the live server's origin are the page's own local objects (image previews).
        local = (live_server, f"blob:{live_server}/")
        page.on("request", lambda req: None if req.url.startswith(local) else outside.append(req.url))
        yield page
        browser.close()
    assert errors == []
    assert outside == [], outside


def screenshot(page: Page, name: str) -> None:
    """docs/screenshots/NAME, the whole page, with no hover state on the link just clicked."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.mouse.move(0, VIEWPORT["height"] - 1)
    page.screenshot(path=str(SCREENSHOTS / name), full_page=True)
