"""Downloads through real servers: progress over SSE, and a SIGKILL mid-download then a restart."""

from __future__ import annotations

import hashlib
import time
from collections.abc import Iterator
from pathlib import Path

import httpx

from mlx_manager.records import DownloadStatus
from tests.conftest import SMOLLM_REPO
from tests.hub_server import HubServer
from tests.mlx_manager.routers.downloads_support import (
    all_jobs,
    models,
    partial_bytes,
    wait_for,
    wait_for_status,
)
from tests.support import ServerProcess

WEIGHTS = "model.safetensors"
MB = 1024 * 1024


def _post_download(http: httpx.Client) -> httpx.Response:
    http.get("/")  # the CSRF cookie, as a page would have it
    return http.post(
        "/downloads", data={"repo_id": SMOLLM_REPO}, headers={"X-CSRF-Token": http.cookies["mlx_csrf"]}
    )


def _events(stream: httpx.Response) -> Iterator[tuple[str, str]]:
    """(event name, data) for each server-sent event; comments (pings) skipped."""
    name, data = "message", []
    for line in stream.iter_lines():
        if line.startswith("event:"):
            name = line.removeprefix("event:").strip()
        elif line.startswith("data:"):
            data.append(line.removeprefix("data:").removeprefix(" "))
        elif not line and data:
            yield name, "\n".join(data)
            name, data = "message", []


def _attribute(html: str, name: str) -> str:
    return html.split(f'{name}="', 1)[1].split('"', 1)[0]


def test_any_watching_page_gets_each_download_row_over_sse(
    hub: HubServer, hub_cache: Path, live_server: str
) -> None:
    hub.throttle_bps = 60 * MB  # ~2 s, so progress arrives in about eight events (4 a second)
    seen: list[tuple[str, str]] = []
    deadline = time.monotonic() + 90
    with (
        httpx.Client(base_url=live_server, timeout=30) as http,
        http.stream("GET", "/downloads/events") as stream,
    ):
        assert stream.status_code == 200
        assert stream.headers["content-type"].startswith("text/event-stream")
        assert _post_download(http).status_code == 202
        for name, data in _events(stream):
            seen.append((name, data))
            if 'data-status="completed"' in data or time.monotonic() > deadline:
                break
    names = [name for name, _ in seen]
    assert names[0] == "download-created" and 'data-status="queued"' in seen[0][1]
    job_id = _attribute(seen[0][1], "id").removeprefix("download-")
    rows = [data for name, data in seen if name == f"download-{job_id}"]
    assert 'data-status="completed"' in rows[-1], "the stream ended before the download completed"
    running = [int(_attribute(row, "data-bytes-done")) for row in rows if 'data-status="running"' in row]
    assert len(running) >= 4 and running == sorted(running)
    assert any("/s ·" in row and " left" in row for row in rows)  # speed and ETA shown while running
    assert f'sse-swap="download-{job_id}"' in rows[-1]


def test_killed_server_resumes_the_download_after_a_restart(
    hub: HubServer, home: Path, tmp_path: Path
) -> None:
    cache = tmp_path / "hf-cache"
    env = {
        "HF_ENDPOINT": hub.url,  # the defaults of the hub settings, as a user would set them
        "HF_HUB_CACHE": str(cache),
        "HF_HUB_DISABLE_TELEMETRY": "1",
        "MLX_MANAGER_IMPORT_DEFAULT_MODEL": "false",
    }
    log = tmp_path / "serve.log"
    hub.throttle_bps = 10 * MB  # 8 MB in under a second; the rest would take another ten
    first = ServerProcess(home, log, env)
    first.start()
    try:
        with httpx.Client(base_url=first.url, timeout=30) as http:
            assert _post_download(http).status_code == 202, log.read_text()[-2000:]
        wait_for(lambda: partial_bytes(cache) > 8 * MB, 60, "8 MB of the weights on disk")
    finally:
        assert first.process is not None
        first.process.kill()  # SIGKILL: no shutdown, no cleanup
        first.process.wait(timeout=10)
    [job] = all_jobs()
    assert job.status == DownloadStatus.RUNNING and job.id is not None
    kept = partial_bytes(cache)

    hub.throttle_bps = None
    second = ServerProcess(home, log, env)
    second.start()
    try:
        wait_for_status(job.id, DownloadStatus.COMPLETED, timeout=120)
        resumed_from = hub.ranges(WEIGHTS)[-1]
        assert resumed_from is not None, "the restarted download fetched the weights from the start"
        assert int(resumed_from.removeprefix("bytes=").rstrip("-")) >= kept
        [record] = models()
        assert record.id == SMOLLM_REPO and Path(record.path).is_relative_to(cache)
        for remote in hub.repos[SMOLLM_REPO].files:
            local = Path(record.path) / remote.path
            assert local.stat().st_size == remote.size
            assert hashlib.sha256(local.read_bytes()).hexdigest() == remote.sha256
        completion = httpx.post(
            f"{second.url}/v1/completions",
            json={"model": SMOLLM_REPO, "prompt": "The capital of France is", "max_tokens": 1},
            timeout=120,
        )
        assert completion.status_code == 200, completion.text
        assert completion.json()["usage"]["completion_tokens"] == 1
    finally:
        second.stop()
    assert len(all_jobs()) == 1 and len(models()) == 1
