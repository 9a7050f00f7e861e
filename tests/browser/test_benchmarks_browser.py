"""A model benchmark from the model's page in a real browser, with the real SmolLM2 (a short
run): the job shows its progress, then its figures; they are stored in `model_benchmarks` and
appear in the model's table and in the Benchmarks page's table across models.

Writes docs/screenshots/benchmarks.png on the way.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from playwright.sync_api import expect
from sqlmodel import Session, select

from mlx_manager.records import ModelBenchmark
from mlx_server.database import get_engine
from mlx_server.records import ModelRecord, ModelSource
from tests.browser.support import SECONDS, browse, screenshot

PROMPT_TOKENS, GENERATED_TOKENS = 32, 8


@pytest.mark.browser
def test_benchmark_from_the_model_page_is_stored_and_tabled(
    live_server: str, chromium: Path, smollm_dir: Path
) -> None:
    with Session(get_engine()) as session:
        session.add(ModelRecord(id="smol", source=ModelSource.LOCAL, path=str(smollm_dir)))
        session.commit()

    with browse(live_server, chromium) as page:
        page.goto(live_server + "/models/smol")
        section = page.locator("#benchmark")
        expect(section.get_by_test_id("no-benchmarks")).to_be_visible()
        section.get_by_label("Prompt tokens").fill(str(PROMPT_TOKENS))
        section.get_by_label("Generated tokens").fill(str(GENERATED_TOKENS))
        section.get_by_role("button", name="Benchmark").click()
        job = section.get_by_test_id("benchmark-job")
        expect(job).to_have_attribute("data-status", "running")
        expect(job).to_have_attribute("data-status", "done", timeout=120 * SECONDS)
        expect(job.get_by_test_id("benchmark-summary")).to_contain_text("decode")

        with Session(get_engine()) as session:
            run = session.exec(select(ModelBenchmark)).one()
        assert (run.model_id, run.prompt_tokens, run.generated_tokens) == ("smol", 32, 8)
        assert run.prefill_tokens_per_s > 0 and run.decode_tokens_per_s > 0 and run.ttft_s > 0
        assert run.peak_memory_bytes >= run.model_bytes > 0

        row = section.get_by_test_id("benchmark-row")  # the model's table, refreshed at the end
        expect(row).to_have_count(1)
        expect(row.get_by_test_id("decode")).to_have_text(f"{run.decode_tokens_per_s:.1f} tok/s")

        page.get_by_role("link", name="Benchmarks", exact=True).click()
        page.wait_for_url(live_server + "/benchmarks")
        row = page.get_by_test_id("benchmark-row")
        expect(row).to_have_count(1)
        expect(row).to_have_attribute("data-model-id", "smol")
        expect(row.get_by_test_id("prefill")).to_have_text(f"{run.prefill_tokens_per_s:.1f} tok/s")
        expect(row.get_by_test_id("ttft")).to_have_text(f"{run.ttft_s:.2f} s")
        screenshot(page, "benchmarks.png")
