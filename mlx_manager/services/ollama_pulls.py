"""Ollama's /api/pull, served by the download manager: the server's /api routes get the
progress of the job that downloads the repo (queued, bytes as they arrive, registered) while
the manager runs (`pulls_for_ollama()` in the lifespan installs it)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import asynccontextmanager

from mlx_manager.services.download_state import DownloadRefused, DownloadState
from mlx_manager.services.pulls import follow_pull, start_pull
from mlx_server.facade import PullProgress, background_session, get_model, set_model_puller


def _progress(state: DownloadState) -> PullProgress:
    return PullProgress(
        status=state.status.value,  # the same five names
        bytes_done=state.bytes_done,
        bytes_total=state.bytes_total,
        model_id=state.model_id,
        error=state.error if not state.active and state.status.value != "completed" else None,
    )


async def pull_progress(repo_id: str) -> AsyncGenerator[PullProgress, None]:
    """Start (or resume, or join) the repo's download as `mlx-manager pull` does and follow it
    until it ends; a model already registered under that id is done at once, as Ollama answers
    a pull of a model it has."""
    with background_session() as session:
        if get_model(session, repo_id) is not None:
            yield PullProgress(status="completed", model_id=repo_id)
            return
    try:
        started = await asyncio.to_thread(start_pull, repo_id)  # asks the hub first
    except DownloadRefused as exc:
        yield PullProgress(status="failed", error=exc.message, error_status=exc.status_code)
        return
    async for state in follow_pull(started.id):
        yield _progress(state.download)
        if not state.download.active:
            return


@asynccontextmanager
async def pulls_for_ollama() -> AsyncIterator[None]:
    """For the app's lifespan, inside download_services(): /api/pull uses this manager."""
    set_model_puller(pull_progress)
    try:
        yield
    finally:
        set_model_puller(None)
