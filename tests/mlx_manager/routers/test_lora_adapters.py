"""The model page's LoRA section: register an adapter directory over the model (refused with
what to fix when it is not one), see it listed under its model id, remove it."""

from __future__ import annotations

from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from tests.mlx_server.api.test_lora_api import write_adapter

HTMX = {"HX-Request": "true"}


@pytest.fixture(scope="module")
def adapter(smollm_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_adapter(tmp_path_factory.mktemp("lora-page") / "tone", smollm_dir, layers=2)


def test_the_model_page_registers_lists_and_removes_an_adapter(
    page: TestClient, adapter: Path, tmp_path: Path
) -> None:
    html = page.get("/models/smol").text
    assert 'data-testid="model-lora"' in html and 'name="base_model" value="smol"' in html

    refused = page.post(
        "/lora-adapters", data={"base_model": "smol", "name": "tone", "path": str(tmp_path)}, headers=HTMX
    )
    assert refused.status_code == 400 and "lacks adapter_config.json and adapters.safetensors" in refused.text

    form = {"base_model": "smol", "name": "tone", "path": str(adapter)}
    saved = page.post("/lora-adapters", data=form, headers=HTMX)
    assert saved.status_code == 200 and "Registered smol+tone" in saved.text
    plain = page.post("/lora-adapters", data={**form, "name": "tone2"}, follow_redirects=False)
    assert plain.status_code == 303 and plain.headers["location"] == "/models/smol"
    html = page.get("/models/smol").text
    assert "<code>smol+tone</code>" in html and "<code>smol+tone2</code>" in html
    assert "smol+tone" in [m["id"] for m in page.get("/v1/models").json()["data"]]

    removed = page.post("/lora-adapters/smol+tone/delete", headers=HTMX)
    assert removed.status_code == 200 and "Removed smol+tone." in removed.text
    assert "<code>smol+tone</code>" not in removed.text and "<code>smol+tone2</code>" in removed.text
