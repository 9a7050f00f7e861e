"""The models page marks a probed vision model: its type and the "vision" badge."""

from __future__ import annotations

import re
from pathlib import Path

from fastapi.testclient import TestClient
from sqlmodel import Session

from mlx_server.database import get_engine
from mlx_server.models.store import save_capabilities
from mlx_server.records import ModelRecord, ModelSource


def test_a_probed_vision_model_shows_the_vision_badge(client: TestClient, tiny_vision_dir: Path) -> None:
    with Session(get_engine()) as session:
        session.add(ModelRecord(id="tiny-vl", source=ModelSource.LOCAL, path=str(tiny_vision_dir)))
        session.commit()
        # What the probe stores for it (tests/mlx_server/services/operations/test_probe_vision.py).
        save_capabilities(
            session, "tiny-vl", model_type="vision", model_family="qwen", supports_multi_image=True
        )
    page = client.get("/models").text
    row = re.search(r"<tr[^>]*tiny-vl.*?</tr>", page, re.S)
    assert row is not None
    assert 'class="badge cap-vision">vision</span>' in row.group(0)
    assert 'data-testid="model-type">vision</span>' in row.group(0)
