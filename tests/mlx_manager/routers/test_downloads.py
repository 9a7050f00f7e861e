"""Background downloads from the local hub: progress, registration once, cancel, resume, corruption."""

from __future__ import annotations

import hashlib
import queue
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlmodel import Session

from mlx_manager.main import create_app
from mlx_manager.records import DownloadJob, DownloadStatus
from mlx_manager.services.download_state import DownloadEvent
from mlx_manager.services.downloads import (
    CompletedDownload,
    DownloadManager,
    add_completion_hook,
    get_download_manager,
    remove_completion_hook,
)
from mlx_manager.services.settings_store import AUTO_PROBE, HUB_TOKEN, set_setting
from mlx_server.database import get_engine
from mlx_server.records import ModelSource
from tests.conftest import GATED_REPO, SMOLLM_REPO
from tests.hub_server import HubRepo, HubServer
from tests.mlx_manager.routers.downloads_support import job, models, partial_bytes, wait_for, wait_for_status
from tests.support import csrf_headers

WEIGHTS = "model.safetensors"
MB = 1024 * 1024


@pytest.fixture(autouse=True)
def _no_auto_probe(hub_cache: Path, session: Session) -> None:
    """These tests are about transfers: the probe that would follow each download (a real model
    run, and a prefill that delays shutdown) is the browser flow's subject."""
    set_setting(session, AUTO_PROBE, False)


def _start(client: TestClient, repo_id: str = SMOLLM_REPO) -> int:
    response = client.post("/downloads", data={"repo_id": repo_id}, headers=csrf_headers(client))
    assert response.status_code == 202, response.text
    assert 'data-status="queued"' in response.text or 'data-status="running"' in response.text
    return int(response.text.split('id="download-', 1)[1].split('"', 1)[0])


def _snapshot_matches_repo(path: Path, repo: HubRepo) -> None:
    for remote in repo.files:
        local = path / remote.path
        assert local.stat().st_size == remote.size, remote.path
        assert hashlib.sha256(local.read_bytes()).hexdigest() == remote.sha256, remote.path


@pytest.fixture
def events() -> Iterator[queue.Queue[DownloadEvent]]:
    received: queue.Queue[DownloadEvent] = queue.Queue()
    unsubscribe = get_download_manager().subscribe(received.put)
    yield received
    unsubscribe()


def test_download_reports_progress_and_registers_the_model_once(
    hub: HubServer, hub_client: TestClient, hub_cache: Path, events: queue.Queue[DownloadEvent]
) -> None:
    hub.throttle_bps = 40 * MB  # ~3 s, long enough for several progress events
    job_id = _start(hub_client)
    done = wait_for_status(job_id, DownloadStatus.COMPLETED)

    seen = [e.state for e in list(events.queue) if e.name == f"download-{job_id}"]
    assert [e.name for e in list(events.queue)].count("download-created") == 1
    assert seen[0].status == DownloadStatus.RUNNING
    assert seen[-1].status == DownloadStatus.COMPLETED
    running = [s for s in seen if s.status == DownloadStatus.RUNNING]
    total = sum(f.size for f in hub.repos[SMOLLM_REPO].files)
    assert len(running) >= 4 and all(s.bytes_total == total for s in running[1:])
    assert [s.bytes_done for s in running] == sorted(s.bytes_done for s in running)
    assert any(s.speed_bps and s.eta_seconds is not None for s in running)
    assert done.bytes_done == done.bytes_total == total

    [record] = models()
    assert (record.id, record.source, record.origin) == (SMOLLM_REPO, ModelSource.HUB, SMOLLM_REPO)
    snapshot = Path(record.path)
    assert snapshot.parent.name == "snapshots" and snapshot.is_relative_to(hub_cache)
    assert (snapshot / WEIGHTS).is_symlink()  # huggingface_hub's cache layout: links into blobs/
    assert record.size_bytes == total
    _snapshot_matches_repo(snapshot, hub.repos[SMOLLM_REPO])
    assert not list(hub_cache.rglob("*.incomplete"))

    again = hub_client.post("/downloads", data={"repo_id": SMOLLM_REPO}, headers=csrf_headers(hub_client))
    assert again.status_code == 409 and "already downloaded" in again.text
    listing = hub_client.get("/downloads")
    assert f'id="download-{job_id}"' in listing.text and 'data-status="completed"' in listing.text


def test_a_repeated_completion_updates_the_one_model_row(hub: HubServer, hub_client: TestClient) -> None:
    job_id = _start(hub_client)
    wait_for_status(job_id, DownloadStatus.COMPLETED)
    weights_gets = len(hub.ranges(WEIGHTS))
    # As if the process died before it could record the completion: the job runs again at start.
    with Session(get_engine()) as session:
        row = session.get(DownloadJob, job_id)
        assert row is not None
        row.status = DownloadStatus.RUNNING
        session.add(row)
        session.commit()
    assert get_download_manager().start() == [job_id]
    wait_for_status(job_id, DownloadStatus.COMPLETED)
    assert len(models()) == 1
    assert len(hub.ranges(WEIGHTS)) == weights_gets  # everything was in the cache already


def test_download_requests_are_checked_before_anything_is_queued(
    hub: HubServer, hub_client: TestClient
) -> None:
    headers = csrf_headers(hub_client)
    malformed = hub_client.post("/downloads", data={"repo_id": "not a repo"}, headers=headers)
    assert malformed.status_code == 400 and "is not a hub model id" in malformed.text
    missing = hub_client.post("/downloads", data={"repo_id": "mlx-community/does-not-exist"}, headers=headers)
    assert missing.status_code == 404 and "has no model" in missing.text
    no_token = hub_client.post("/downloads", data={"repo_id": SMOLLM_REPO})
    assert no_token.status_code == 403  # CSRF
    assert hub_client.post("/downloads/999/cancel", headers=headers).status_code == 404
    assert "No downloads yet" in hub_client.get("/downloads").text


def test_cancel_stops_the_transfer_and_resume_continues_it(
    hub: HubServer, hub_client: TestClient, hub_cache: Path
) -> None:
    hub.throttle_bps = 4 * MB
    job_id = _start(hub_client)
    wait_for(lambda: partial_bytes(hub_cache) > 2 * MB, 30, "2 MB of weights on disk")
    cancelled = hub_client.post(f"/downloads/{job_id}/cancel", headers=csrf_headers(hub_client))
    assert cancelled.status_code == 200 and 'data-status="cancelled"' in cancelled.text
    assert job(job_id).status == DownloadStatus.CANCELLED
    assert models() == []
    [partial] = hub_cache.rglob("*.incomplete")
    kept = partial.stat().st_size
    assert kept > 2 * MB

    hub.throttle_bps = None
    resumed = hub_client.post(f"/downloads/{job_id}/resume", headers=csrf_headers(hub_client))
    assert resumed.status_code == 200
    wait_for_status(job_id, DownloadStatus.COMPLETED)
    last_range = hub.ranges(WEIGHTS)[-1]
    assert last_range is not None and int(last_range.removeprefix("bytes=").rstrip("-")) >= kept
    [record] = models()
    _snapshot_matches_repo(Path(record.path), hub.repos[SMOLLM_REPO])
    again = hub_client.post(f"/downloads/{job_id}/cancel", headers=csrf_headers(hub_client))
    assert again.status_code == 409


def test_corrupt_file_fails_the_download_and_registers_nothing(
    hub: HubServer, hub_client: TestClient, hub_cache: Path
) -> None:
    hub.corrupt.add(f"{SMOLLM_REPO}/{WEIGHTS}")
    job_id = _start(hub_client)
    failed = wait_for_status(job_id, DownloadStatus.FAILED)
    assert failed.error is not None
    assert "model.safetensors arrived corrupt" in failed.error and "resume" in failed.error
    assert models() == []
    weights_sha = hub.repos[SMOLLM_REPO].file(WEIGHTS)
    assert weights_sha is not None
    blobs = [p.name for p in hub_cache.glob("models--*/blobs/*")]
    assert blobs and not [name for name in blobs if name.startswith(weights_sha.sha256)]  # nor a partial
    row = hub_client.get("/downloads").text
    assert 'data-status="failed"' in row and "arrived corrupt" in row

    hub.corrupt.clear()
    hub_client.post(f"/downloads/{job_id}/resume", headers=csrf_headers(hub_client))
    wait_for_status(job_id, DownloadStatus.COMPLETED)
    [record] = models()
    _snapshot_matches_repo(Path(record.path), hub.repos[SMOLLM_REPO])


def test_graceful_shutdown_leaves_the_job_queued_and_the_next_start_resumes_it(
    hub: HubServer, hub_cache: Path
) -> None:
    hub.throttle_bps = 4 * MB
    with TestClient(create_app()) as first:
        job_id = _start(first)
        wait_for(lambda: partial_bytes(hub_cache) > 2 * MB, 30, "2 MB of weights on disk")
    assert job(job_id).status == DownloadStatus.QUEUED
    hub.throttle_bps = None
    with TestClient(create_app()):
        wait_for_status(job_id, DownloadStatus.COMPLETED)
    assert int((hub.ranges(WEIGHTS)[-1] or "bytes=0-").removeprefix("bytes=").rstrip("-")) > 2 * MB
    assert len(models()) == 1


def test_completion_hooks_run_once_and_respect_their_setting(
    hub: HubServer, hub_client: TestClient, session: Session
) -> None:
    calls: list[CompletedDownload] = []
    skipped: list[CompletedDownload] = []
    set_setting(session, AUTO_PROBE, False)
    add_completion_hook(calls.append)
    add_completion_hook(skipped.append, enabled_by=AUTO_PROBE)
    try:
        job_id = _start(hub_client)
        wait_for_status(job_id, DownloadStatus.COMPLETED)
        wait_for(lambda: len(calls) == 1, 10, "the completion hook")
    finally:
        remove_completion_hook(calls.append)
        remove_completion_hook(skipped.append)
    [done] = calls
    assert (done.job_id, done.model_id, done.repo_id) == (job_id, SMOLLM_REPO, SMOLLM_REPO)
    assert (done.path / "config.json").is_file()
    assert skipped == []


def test_a_waiting_job_cancelled_then_resumed_runs_exactly_once(
    hub: HubServer, hub_cache: Path, session: Session
) -> None:
    set_setting(session, HUB_TOKEN, hub.token)  # the gated repo needs it
    hub.throttle_bps = 4 * MB
    manager = DownloadManager(max_parallel=1)  # the second job waits for the first
    try:
        first = manager.submit(SMOLLM_REPO)
        second = manager.submit(GATED_REPO)
        wait_for(lambda: manager.get(first.id).status == DownloadStatus.RUNNING, 30, "the first job to run")
        assert manager.cancel(second.id).status == DownloadStatus.CANCELLED
        assert manager.resume(second.id).status == DownloadStatus.QUEUED
        hub.throttle_bps = None
        wait_for_status(first.id, DownloadStatus.COMPLETED)
        wait_for_status(second.id, DownloadStatus.COMPLETED)
    finally:
        manager.shutdown()
    assert sorted(m.id for m in models()) == sorted([SMOLLM_REPO, GATED_REPO])
    assert len(hub.ranges(f"{GATED_REPO}/resolve/{hub.repos[GATED_REPO].commit}/{WEIGHTS}")) == 1
