"""The audit log page in a real browser: filter, load more, details, live tail."""

from __future__ import annotations

import re
from datetime import timedelta
from pathlib import Path

import pytest
from playwright.sync_api import expect
from sqlmodel import Session

from mlx_server.database import get_engine
from mlx_server.records import AuditLog, utcnow
from mlx_server.services.operations.audit import audit_service
from tests.browser.support import browse


def _rows(model: str, count: int, start: int, prefix: str = "") -> list[AuditLog]:
    """`count` rows, oldest first (ids follow recording order), the newest `start` minutes ago."""
    now = utcnow()
    return [
        AuditLog(
            request_id=f"{prefix or model}-{i}",
            created_at=now - timedelta(minutes=start + i),
            endpoint="POST /v1/chat/completions",
            model=model,
            status=200,
            latency_ms=100.0 + i,
            ttft_ms=20.0,
            prompt_tokens=30,
            completion_tokens=5,
            parameters={"temperature": 0.7, "max_tokens": 64},
        )
        for i in reversed(range(count))
    ]


@pytest.mark.browser
def test_filter_load_more_details_and_live_tail(live_server: str, chromium: Path, tmp_path: Path) -> None:
    with Session(get_engine()) as session:
        session.add_all(_rows("alpha", 60, start=100) + _rows("beta", 20, start=0))
        session.commit()

    with browse(live_server, chromium) as page:
        page.goto(live_server + "/audit")
        expect(page.get_by_test_id("audit-total")).to_have_text("80")
        rows = page.locator("tr.audit-row")
        expect(rows).to_have_count(50)

        page.get_by_label("Model").press_sequentially("alpha")  # active search: no button to press
        expect(page.get_by_test_id("audit-total")).to_have_text("60")
        expect(page).to_have_url(re.compile(r"/audit\?model=alpha"))
        expect(rows).to_have_count(50)
        expect(page.locator("tr.audit-row td:nth-child(3)", has_text="beta")).to_have_count(0)

        page.get_by_role("link", name="Load more").click()
        expect(rows).to_have_count(60)
        expect(page.get_by_role("link", name="Load more")).to_have_count(0)
        expect(rows.last).to_contain_text("159 ms")  # the oldest alpha row: latency 100 + 59

        rows.first.get_by_role("link").click()  # details open under the row
        detail = page.locator("tr.audit-detail-row")
        expect(detail).to_contain_text("alpha-0")
        expect(detail.locator("table.audit-parameters")).to_contain_text("temperature")
        expect(detail).to_contain_text("20.0 ms")
        rows.first.get_by_role("link").click()  # and close again
        expect(detail).to_have_count(0)

        page.get_by_label("Live").check()  # back to the newest page, now following the log
        expect(page.get_by_role("status").filter(has_text="Live")).to_be_visible()
        expect(rows).to_have_count(50)
        audit_service.record(_rows("beta", 1, start=-1)[0])  # filtered out
        audit_service.record(_rows("alpha", 1, start=-1, prefix="live")[0])
        expect(rows).to_have_count(51)
        # A request's row is written as it arrives: drawn in flight, then replaced when it ends.
        arriving = AuditLog(request_id="arriving", endpoint="POST /v1/chat/completions", model="alpha")
        audit_service.begin(arriving)
        expect(rows).to_have_count(52)
        expect(rows.first).to_contain_text("in flight")
        audit_service.update(arriving, {"state": "completed", "status": 200, "latency_ms": 42.0})
        expect(rows.first).to_contain_text("42 ms")
        expect(rows.first.locator(".status")).to_have_text("200")
        expect(rows).to_have_count(52)
        rows.nth(1).get_by_role("link").click()
        expect(page.locator("tr.audit-detail-row")).to_contain_text("live-0")
        page.screenshot(path=str(tmp_path / "audit.png"), full_page=True)
