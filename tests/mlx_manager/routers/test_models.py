"""The models page with the real SmolLM2: load, pin, unload, probe, delete, import."""

from __future__ import annotations

import time
from pathlib import Path

from fastapi.testclient import TestClient
from sqlmodel import Session

from mlx_server.database import get_engine
from mlx_server.models.pool import get_model_pool
from mlx_server.records import ModelCapabilities

HTMX = {"HX-Request": "true"}


def test_page_lists_the_model_with_size_bits_and_free_disk(page: TestClient) -> None:
    html = page.get("/models").text
    assert 'data-model-id="smol"' in html
    assert "95.4 MiB" in html and "4-bit" in html  # size from the record, bits from config.json
    assert "free" in html and "not probed" in html


def test_load_pin_unpin_unload_change_the_pool_and_the_row(page: TestClient) -> None:
    loaded = page.post("/models/smol/load", headers=HTMX)
    assert loaded.status_code == 200 and "state-loaded" in loaded.text and "state-pinned" not in loaded.text
    assert get_model_pool().get_loaded("smol") is not None
    pinned = page.post("/models/smol/pin", headers=HTMX)
    assert "state-pinned" in pinned.text and get_model_pool().get_loaded("smol").pinned  # type: ignore[union-attr]
    refused = page.post("/models/smol/delete", headers=HTMX)
    assert "unload it before deleting" in refused.text
    page.post("/models/smol/unpin", headers=HTMX)
    assert not get_model_pool().get_loaded("smol").pinned  # type: ignore[union-attr]
    unloaded = page.post("/models/smol/unload", headers=HTMX)
    assert "not loaded" in unloaded.text and get_model_pool().get_loaded("smol") is None


def test_plain_forms_redirect_back_and_need_the_csrf_token(page: TestClient) -> None:
    response = page.post("/models/smol/load", follow_redirects=False)
    assert response.status_code == 303 and response.headers["location"] == "/models"
    page.headers.pop("X-CSRF-Token")
    assert page.post("/models/smol/unload").status_code == 403
    assert get_model_pool().get_loaded("smol") is not None


def test_probe_runs_in_the_background_and_streams_its_steps(page: TestClient) -> None:
    started = page.post("/models/smol/probe", headers=HTMX)
    assert "probing" in started.text
    with page.stream("GET", "/models/smol/probe/events") as events:
        deadline = time.monotonic() + 120
        names = []
        for line in events.iter_lines():
            assert time.monotonic() < deadline, "the probe did not finish in 120 s"
            if line.startswith("event: "):
                names.append(line.removeprefix("event: "))
            if names and names[-1] == "done":
                break
    assert names[0] == "probe" and names[-1] == "done"
    with Session(get_engine()) as session:
        capabilities = session.get(ModelCapabilities, "smol")
    assert capabilities is not None and capabilities.practical_max_tokens
    detail = page.get("/models/smol").text
    assert 'data-testid="probe-done"' in detail and str(capabilities.practical_max_tokens) in detail
    assert get_model_pool().get_loaded("smol") is None  # unloaded: it was not loaded before


def test_delete_a_local_model_keeps_its_files(page: TestClient, smollm_dir: Path) -> None:
    confirm = page.get("/models/smol/delete")
    assert "files in" in confirm.text and "stay" in confirm.text
    deleted = page.post("/models/smol/delete")
    assert "Removed smol from the list" in deleted.text
    assert 'data-model-id="smol"' not in page.get("/models").text
    assert (smollm_dir / "config.json").exists()
    assert page.post("/models/smol/load").status_code == 404


def test_import_gguf_by_path(page: TestClient, smollm_gguf: Path, tmp_path: Path) -> None:
    for name in ("nope.gguf", "é" * 200 + ".gguf"):  # the second: a name no file can have
        missing = page.post("/models/import", data={"path": str(tmp_path / name)})
        assert missing.status_code == 400 and "No file at" in missing.text
    imported = page.post("/models/import", data={"path": str(smollm_gguf), "model_id": "smol-copy"})
    assert imported.status_code == 200 and "Imported smol-copy" in imported.text
    assert '<span data-testid="source-quantization">from Q4_1</span>' in imported.text
    again = page.post("/models/import", data={"path": str(smollm_gguf), "model_id": "smol-copy"})
    assert again.status_code == 400 and "already exists" in again.text
    deleted = page.post("/models/smol-copy/delete")
    assert "Deleted smol-copy and its files" in deleted.text


def test_inspect_shows_the_gguf_and_the_planned_import_before_it_starts(
    page: TestClient, smollm_gguf: Path, tmp_path: Path
) -> None:
    plan = page.get("/models/import/inspect", params={"path": str(smollm_gguf)}, headers=HTMX)
    assert plan.status_code == 200 and "<html" not in plan.text  # the plan alone, for htmx
    assert '<code data-testid="gguf-architecture">llama</code>' in plan.text
    assert "0.13 B" in plan.text  # 134.5 M parameters
    assert (
        "Q4_1, 93.8 MiB:" in plan.text
        and "Q4_1 (210 tensors), Q8_0 (1 tensors), F32 (61 tensors)" in plan.text
    )
    assert "4-bit 79 %" in plan.text and "8-bit 21 %" in plan.text  # token_embd is Q8_0
    eight = page.get(
        "/models/import/inspect", params={"path": str(smollm_gguf), "quantization": "8bit"}, headers=HTMX
    )
    assert "8-bit 100 %" in eight.text
    sizes = [float(r.text.split('gguf-planned-size">')[1].split(" MiB")[0]) for r in (plan, eight)]
    assert sizes[1] > 1.3 * sizes[0]  # 8-bit weights take more room than 4-bit
    full = page.get("/models/import/inspect", params={"path": str(smollm_gguf)})  # without JavaScript
    assert "<html" in full.text and 'data-testid="gguf-plan"' in full.text
    for name in ("x.gguf", "é" * 200 + ".gguf"):
        missing = page.get("/models/import/inspect", params={"path": str(tmp_path / name)}, headers=HTMX)
        assert "No file at" in missing.text
    empty = page.get("/models/import/inspect", headers=HTMX)  # the form sent with no path
    assert empty.status_code == 200 and "Give the full path of a .gguf file" in empty.text
    bad = page.get("/models/import/inspect", params={"path": str(smollm_gguf), "quantization": "3bit"})
    assert bad.status_code == 422
