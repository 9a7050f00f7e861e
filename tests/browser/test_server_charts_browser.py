"""The Server page's engine charts in a real browser: while a stream of the real SmolLM2 runs,
the decode chart (polled by the page) shows tokens per second above zero and a line drawn off
the bottom, and the running-sequences chart counts the stream.

Writes docs/screenshots/server-charts.png on the way.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import Page, expect
from sqlmodel import Session

from mlx_server.config import reset_settings
from mlx_server.database import get_engine
from mlx_server.records import ModelRecord, ModelSource
from tests.browser.support import SECONDS, browse, screenshot

STREAM_TOKENS = 64  # several seconds of decoding here: the page polls every second
# The headline figure of a chart, as its figure element carries it.
NOW = "key => parseFloat(document.querySelector(`[data-chart=${key}]`)?.dataset.now ?? '0')"


@pytest.fixture
def fast_sampling(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A sample every half second (the default is two), set before the app starts."""
    monkeypatch.setenv("MLX_SERVER_ENGINE_SAMPLE_SECONDS", "0.5")
    reset_settings()


@pytest.fixture
def smol(live_server: str, smollm_dir: Path) -> Iterator[str]:
    with Session(get_engine()) as session:
        session.add(ModelRecord(id="smol", source=ModelSource.LOCAL, path=str(smollm_dir)))
        session.commit()
    yield "smol"


def _stream(live_server: str, chunks: list[str], enough: threading.Event) -> None:
    """One streamed chat completion, as an API client makes it, its chunks kept as they come;
    the client hangs up once `enough` is set (the server stops generating)."""
    body = {
        "model": "smol",
        "messages": [{"role": "user", "content": "Count from 1 to 100, separated by commas."}],
        "max_tokens": STREAM_TOKENS,
        "temperature": 0,
        "stream": True,
    }
    with httpx.stream("POST", f"{live_server}/v1/chat/completions", json=body, timeout=120) as reply:
        assert reply.status_code == 200
        for line in reply.iter_lines():
            chunks.append(line)
            if enough.is_set():
                return


def _decode_line_rises(page: Page) -> bool:
    """Whether the decode chart's line has a point above the bottom of its 60-unit box."""
    points: str = page.locator("[data-chart=decode] polyline").first.get_attribute("points") or ""
    return any(float(point.split(",")[1]) < 59 for point in points.split())


@pytest.mark.browser
def test_server_charts_show_decode_while_a_stream_runs(
    fast_sampling: None, live_server: str, chromium: Path, smol: str
) -> None:
    with browse(live_server, chromium) as page:
        page.goto(live_server + "/server?minutes=5")
        charts = page.get_by_test_id("engine-charts")
        for title in ("Decode", "Prompt (prefill)", "Queue depth", "Running sequences", "Memory"):
            expect(charts.get_by_text(title, exact=True)).to_be_visible()
        assert page.evaluate(NOW, "decode") == 0

        chunks: list[str] = []
        enough = threading.Event()
        stream = threading.Thread(target=_stream, args=(live_server, chunks, enough), daemon=True)
        stream.start()
        page.wait_for_function(f"() => ({NOW})('decode') > 0", timeout=90 * SECONDS, polling=200)
        assert stream.is_alive(), "the decode point came only after the stream ended"
        assert page.evaluate(NOW, "running") >= 1
        assert _decode_line_rises(page)
        expect(charts.locator("[data-chart=decode] .chart-now")).to_contain_text("tok/s")
        screenshot(page, "server-charts.png")

        # The prompt went through prefill (no cache entry yet): its chart rose too.
        expect(charts.locator("[data-chart=prefill] .chart-now + .muted")).not_to_have_text("peak 0.0 tok/s")
        enough.set()
        stream.join(30)
        assert not stream.is_alive() and chunks
