"""Ollama's /api/pull, served by the download manager: the server's /api routes get the
progress of the job that downloads the repo (queued, bytes as they arrive, registered) while
the manager runs (`pulls_for_ollama()` in the lifespan installs it)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import asynccontextmanager

from sqlmodel import Session

from mlx_manager.services.download_state import DownloadEvent, DownloadRefused, DownloadState
from mlx_manager.services.downloads import get_download_manager
from mlx_server.facade import PullProgress, get_engine, get_model, set_model_puller


def _progress(state: DownloadState) -> PullProgress:
    return PullProgress(
        status=state.status.value,  # the same five names
        bytes_done=state.bytes_done,
        bytes_total=state.bytes_total,
        model_id=state.model_id,
        error=state.error if not state.active and state.status.value != "completed" else None,
    )


async def pull_progress(repo_id: str) -> AsyncGenerator[PullProgress, None]:
    """Submit (or join) the repo's download and follow it until it ends; a model already
    registered under that id is done at once, as Ollama answers a pull of a model it has."""
    with Session(get_engine()) as session:
        if get_model(session, repo_id) is not None:
            yield PullProgress(status="completed", model_id=repo_id)
            return
    manager = get_download_manager()
    loop = asyncio.get_running_loop()
    updates: asyncio.Queue[DownloadState] = asyncio.Queue()

    def on_event(event: DownloadEvent) -> None:  # on a download worker thread
        if event.state.repo_id == repo_id:
            loop.call_soon_threadsafe(updates.put_nowait, event.state)

    unsubscribe = manager.subscribe(on_event)
    try:
        try:
            state = await asyncio.to_thread(manager.submit, repo_id)  # asks the hub first
        except DownloadRefused as exc:
            yield PullProgress(status="failed", error=exc.message, error_status=exc.status_code)
            return
        while True:
            yield _progress(state)
            if not state.active:
                return
            update = await updates.get()
            state = update if update.id == state.id else state
    finally:
        unsubscribe()


@asynccontextmanager
async def pulls_for_ollama() -> AsyncIterator[None]:
    """For the app's lifespan, inside download_services(): /api/pull uses this manager."""
    set_model_puller(pull_progress)
    try:
        yield
    finally:
        set_model_puller(None)
