"""A Hugging Face checkpoint converted to MLX in the app with mlx-lm's conversion: SmolLM2
dequantized to float32, quantized again to 8 bits, registered, and asked for Paris; progress
shown, a cancel keeps nothing, what cannot be converted says why."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

from fastapi.testclient import TestClient
from sqlmodel import Session
from typer.testing import CliRunner

from mlx_manager.cli import app
from mlx_server.config import get_settings
from mlx_server.database import get_engine
from mlx_server.models.store import default_embedding_model_dir, get_model
from mlx_server.records import ModelSource
from tests.fixtures.disk_models import write_tiny_checkpoint
from tests.support import csrf_headers

runner = CliRunner()
HTMX = {"HX-Request": "true"}


def test_a_float_checkpoint_converted_to_8_bits_answers_paris(
    client: TestClient, smollm_f32_dir: Path
) -> None:
    converted = runner.invoke(
        app, ["models", "convert", str(smollm_f32_dir), "--bits", "8", "--id", "smol-8bit", "--no-probe"]
    )
    assert converted.exit_code == 0, converted.output
    percents = [float(p) for p in re.findall(r"quantize\s+([\d.]+) %", converted.output)]
    assert len(percents) >= 3 and percents == sorted(percents) and percents[-1] == 90.0
    assert "added as smol-8bit" in converted.output
    with Session(get_engine()) as session:
        record = get_model(session, "smol-8bit")
    assert record is not None and record.source == ModelSource.CONVERTED
    assert record.origin == str(smollm_f32_dir)
    assert json.loads((Path(record.path) / "config.json").read_text())["quantization"]["bits"] == 8
    question = [{"role": "user", "content": "What is the capital of France?"}]
    body = {"model": "smol-8bit", "messages": question, "max_tokens": 12, "temperature": 0}
    answer = client.post("/v1/chat/completions", json=body).json()["choices"][0]["message"]["content"]
    assert "Paris" in answer


def test_a_conversion_cancelled_from_the_page_leaves_no_partial_model(
    client: TestClient, smollm_f32_dir: Path
) -> None:
    client.headers.update(csrf_headers(client))
    form = {"path": str(smollm_f32_dir), "bits": "4", "group_size": "32", "model_id": "smol-4bit"}
    started = client.post("/models/convert", data=form, headers=HTMX)
    assert started.status_code == 202 and 'data-status="running"' in started.text
    seen: list[str] = []
    deadline = time.monotonic() + 120
    while not any(stage.startswith("quantize") and not stage.endswith(" 2.0 %") for stage in seen):
        assert time.monotonic() < deadline, f"no quantize progress within 120 s: {seen}"
        widget = client.get("/models/conversions/smol-4bit").text
        seen += re.findall(r'data-testid="conversion-stage">([^<]+)<', widget)
        time.sleep(0.2)
    cancelled = client.post("/models/conversions/smol-4bit/cancel", headers=HTMX)
    assert 'data-status="cancelled"' in cancelled.text and "nothing was kept" in cancelled.text
    models_dir = get_settings().models_dir
    assert not (models_dir / "smol-4bit").exists()
    assert [p.name for p in models_dir.iterdir() if p.name.startswith(".")] == []  # no staging left
    with Session(get_engine()) as session:
        assert get_model(session, "smol-4bit") is None


def test_what_cannot_be_converted_is_refused_before_any_work(
    client: TestClient, smollm_dir: Path, tmp_path: Path
) -> None:
    unknown = write_tiny_checkpoint(tmp_path / "odd", config={"model_type": "not_a_model"})
    cli = runner.invoke(app, ["models", "convert", str(unknown), "--bits", "4"])
    assert cli.exit_code == 1 and "mlx-lm has no model type 'not_a_model'" in cli.output
    client.headers.update(csrf_headers(client))
    page = client.post("/models/convert", data={"path": str(unknown), "bits": "4"}, headers=HTMX)
    assert page.status_code == 400 and page.headers["HX-Retarget"] == "#model-convert"
    assert "mlx-lm has no model type" in page.text
    refusals = {
        str(smollm_dir): "already an MLX model quantized to 4 bits",
        str(default_embedding_model_dir()): "mlx-lm converts text models only",
        str(tmp_path / "nope"): "There is no directory",
        str(tmp_path / ("é" * 200)): "There is no directory",  # 400 bytes: no file can have that name
    }
    for path, reason in refusals.items():
        refused = runner.invoke(app, ["models", "convert", path, "--bits", "8"])
        assert refused.exit_code == 1 and reason in refused.output, refused.output
    bits = runner.invoke(app, ["models", "convert", str(unknown), "--bits", "3"])
    assert bits.exit_code == 1 and "bits must be 4 or 8" in bits.output
