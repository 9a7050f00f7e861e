"""The manager's admin routes under /v1/admin (what `mlx-manager pull` and `rm` call): a pull from
the local hub streamed to its end, resumed after a cancel, refusals in the API's error shape, and
deleting a model (404 for an unknown id)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlmodel import Session

from mlx_manager.services.settings_store import AUTO_PROBE, set_setting
from mlx_server.database import get_engine
from mlx_server.records import ModelRecord, ModelSource
from tests.conftest import SMOLLM_REPO


@pytest.fixture
def api(client: TestClient, hub_cache: Path, session: Session) -> TestClient:
    """The dashboard app with its hub at the local one; no probe after a download (the CLI test
    sees the probe on arrival)."""
    set_setting(session, AUTO_PROBE, False)
    return client


def _follow(api: TestClient, job_id: int) -> list[dict[str, Any]]:
    states = []
    with api.stream("GET", f"/v1/admin/downloads/{job_id}/events") as response:
        assert response.status_code == 200
        for line in response.iter_lines():
            if line.startswith("data:"):
                states.append(json.loads(line.removeprefix("data:")))
    return states


def test_a_pull_streams_its_progress_until_the_model_is_registered(api: TestClient) -> None:
    started = api.post("/v1/admin/downloads", json={"repo_id": SMOLLM_REPO})
    assert started.status_code == 202, started.text
    assert started.json()["download"]["status"] in ("queued", "running")
    states = _follow(api, started.json()["download"]["id"])
    last = states[-1]
    job = last["download"]
    assert job["status"] == "completed" and job["model_id"] == SMOLLM_REPO
    assert job["bytes_done"] == job["bytes_total"] > 100 * 2**20
    assert last["probe"] == {"status": "off", "step": None, "error": None}
    assert api.get(f"/v1/models/{SMOLLM_REPO}").status_code == 200
    again = api.post("/v1/admin/downloads", json={"repo_id": SMOLLM_REPO})
    assert again.status_code == 409 and "already downloaded" in again.json()["error"]["message"]


def test_pulling_a_cancelled_repo_again_resumes_its_download(api: TestClient) -> None:
    first = api.post("/v1/admin/downloads", json={"repo_id": SMOLLM_REPO}).json()["download"]
    cancelled = api.post(f"/v1/admin/downloads/{first['id']}/cancel")
    assert cancelled.status_code == 200 and cancelled.json()["download"]["status"] == "cancelled"
    resumed = api.post("/v1/admin/downloads", json={"repo_id": SMOLLM_REPO})
    assert resumed.status_code == 202
    assert resumed.json()["download"]["id"] == first["id"]  # the same job, continued from its files
    assert _follow(api, first["id"])[-1]["download"]["status"] == "completed"


def test_pull_refusals_are_api_errors(api: TestClient) -> None:
    missing = api.post("/v1/admin/downloads", json={"repo_id": "mlx-community/no-such-repo"})
    assert missing.status_code == 404
    assert "mlx-community/no-such-repo" in missing.json()["error"]["message"]
    assert api.post("/v1/admin/downloads", json={"repo_id": "not a repo"}).status_code == 400
    assert api.get("/v1/admin/downloads/12345").status_code == 404
    assert api.get("/v1/admin/downloads/12345/events").status_code == 404


def test_deleting_a_model_over_the_api(api: TestClient, tmp_path: Path) -> None:
    with Session(get_engine()) as session:
        session.add(ModelRecord(id="mine", source=ModelSource.LOCAL, path=str(tmp_path)))
        session.commit()
    unknown = api.delete("/v1/admin/models/nope")
    assert unknown.status_code == 404 and unknown.json()["error"]["code"] == "model_not_found"
    deleted = api.delete("/v1/admin/models/mine")
    assert deleted.status_code == 200, deleted.text
    assert deleted.json() == {
        "id": "mine",
        "deleted": True,
        "detail": f"Removed mine from the list; its files stay in {tmp_path}.",
    }
    assert tmp_path.is_dir()
