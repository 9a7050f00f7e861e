"""Benchmarks refused before anything loads (sizes, unknown model, a model that does not
generate text), and `mlx-manager models bench` keeping its run for the Benchmarks page."""

from __future__ import annotations

import time
from pathlib import Path

from fastapi.testclient import TestClient
from sqlmodel import Session, select
from typer.testing import CliRunner

from mlx_manager.cli import app
from mlx_manager.records import ModelBenchmark
from mlx_server.database import get_engine, upgrade_database
from mlx_server.models.pool import get_model_pool
from mlx_server.records import ModelCapabilities, ModelRecord, ModelSource


def test_refusals_say_what_to_change_and_load_nothing(page: TestClient, smollm_dir: Path) -> None:
    with Session(get_engine()) as session:
        session.add(ModelRecord(id="mini", source=ModelSource.LOCAL, path=str(smollm_dir)))
        session.add(ModelCapabilities(model_id="mini", model_type="embeddings"))  # as a probe found
        session.commit()
    cases = [
        ({"model_id": "smol", "prompt_tokens": 0, "generated_tokens": 8}, 400, "prompt_tokens must be 1 to"),
        (
            {"model_id": "smol", "prompt_tokens": 8, "generated_tokens": 1},
            400,
            "generated_tokens must be 2 to",
        ),
        ({"model_id": "nope", "prompt_tokens": 8, "generated_tokens": 8}, 404, "nope"),
        ({"model_id": "mini", "prompt_tokens": 8, "generated_tokens": 8}, 400, "measure text generation"),
    ]
    for form, status, message in cases:
        refused = page.post("/benchmarks", data=form, headers={"HX-Request": "true"})
        assert (refused.status_code, message in refused.text) == (status, True), refused.text
    assert get_model_pool().get_loaded("smol") is None
    assert "No benchmark yet" in page.get("/benchmarks").text


def test_models_bench_prints_and_keeps_the_run(home: Path, smollm_dir: Path) -> None:
    upgrade_database()
    with Session(get_engine()) as session:
        session.add(ModelRecord(id="smol", source=ModelSource.LOCAL, path=str(smollm_dir)))
        session.commit()
    result = CliRunner().invoke(app, ["models", "bench", "smol", "-p", "16", "-g", "4"])
    assert result.exit_code == 0, result.output
    assert "16 prompt tokens, 4 generated" in result.output and "decode " in result.output
    with Session(get_engine()) as session:
        run = session.exec(select(ModelBenchmark)).one()
    assert (run.model_id, run.generated_tokens, run.load_s is not None) == ("smol", 4, True)
    assert f"{run.decode_tokens_per_s:.1f} tok/s" in result.output


def test_one_run_at_a_time_and_a_stopped_run_keeps_nothing(page: TestClient) -> None:
    htmx = {"HX-Request": "true"}
    started = page.post("/benchmarks", data={"model_id": "smol", "generated_tokens": 2048}, headers=htmx)
    assert started.status_code == 202 and 'data-status="running"' in started.text
    second = page.post("/benchmarks", data={"model_id": "smol", "generated_tokens": 8}, headers=htmx)
    assert second.status_code == 409 and "A benchmark of smol is running" in second.text
    widget = page.post("/benchmarks/jobs/smol/stop", headers=htmx).text
    deadline = time.monotonic() + 60  # the stop waits 10 s; a loaded machine may load slower
    while 'data-status="running"' in widget and time.monotonic() < deadline:
        time.sleep(0.2)
        widget = page.get("/benchmarks/jobs/smol", headers=htmx).text
    assert 'data-status="cancelled"' in widget and "nothing was kept" in widget
    assert "No benchmark yet" in page.get("/benchmarks").text
    idle = page.post("/benchmarks/jobs/smol/stop", headers=htmx)  # nothing runs now
    assert idle.status_code == 404 and "No benchmark of smol is running" in idle.text
