"""Hub downloads: start, cancel, resume, list, and live progress as server-sent events.

Every response is an HTML fragment (partials/download_row.html, downloads_list.html); a refused
request answers its status code (400, 403, 404, 409, 422, 502) with partials/hub_error.html.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from functools import partial
from typing import Annotated

from fastapi import APIRouter, Form, Request
from fastapi.responses import HTMLResponse
from sse_starlette import EventSourceResponse, ServerSentEvent

from mlx_manager.deps import RowId
from mlx_manager.services.download_state import DownloadEvent, DownloadRefused, DownloadState
from mlx_manager.services.downloads import DownloadManager, get_download_manager
from mlx_manager.web.templating import templates

router = APIRouter(prefix="/downloads")

ROW = "partials/download_row.html"
PING_SECONDS = 15


def _row(request: Request, job: DownloadState, status_code: int = 200) -> HTMLResponse:
    return templates.TemplateResponse(request, ROW, {"job": job}, status_code=status_code)


def _refused(request: Request, exc: DownloadRefused) -> HTMLResponse:
    context = {"message": exc.message}
    return templates.TemplateResponse(
        request, "partials/hub_error.html", context, status_code=exc.status_code
    )


@router.get("", response_class=HTMLResponse)
def list_downloads(request: Request) -> HTMLResponse:
    jobs = get_download_manager().list()
    return templates.TemplateResponse(request, "partials/downloads_list.html", {"jobs": jobs})


@router.post("", response_class=HTMLResponse, status_code=202)
def start_download(
    request: Request, repo_id: Annotated[str, Form()], revision: Annotated[str, Form()] = "main"
) -> HTMLResponse:
    """Queue a download (it runs in the background); 202 with its row."""
    return _answer(request, partial(get_download_manager().submit, repo_id, revision), status_code=202)


@router.post("/{job_id}/cancel", response_class=HTMLResponse)
def cancel_download(request: Request, job_id: RowId) -> HTMLResponse:
    return _answer(request, partial(get_download_manager().cancel, job_id))


@router.post("/{job_id}/resume", response_class=HTMLResponse)
def resume_download(request: Request, job_id: RowId) -> HTMLResponse:
    return _answer(request, partial(get_download_manager().resume, job_id))


def _answer(request: Request, act: Callable[[], DownloadState], status_code: int = 200) -> HTMLResponse:
    """The job's row after `act`, or the refusal."""
    try:
        job = act()
    except DownloadRefused as exc:
        return _refused(request, exc)
    return _row(request, job, status_code=status_code)


@router.get("/events")
async def download_events() -> EventSourceResponse:
    """Every download's row as it changes (at most 4 per second each), for any watching page."""
    return EventSourceResponse(
        _row_events(get_download_manager()), ping=PING_SECONDS, headers={"Cache-Control": "no-cache"}
    )


async def _row_events(manager: DownloadManager) -> AsyncIterator[ServerSentEvent]:
    """The active jobs' rows first (a page reconnecting catches up), then every update."""
    loop = asyncio.get_running_loop()
    updates: asyncio.Queue[DownloadEvent] = asyncio.Queue()
    # Called on worker threads; raises once this loop is closed, which unsubscribes it.
    unsubscribe = manager.subscribe(lambda event: loop.call_soon_threadsafe(updates.put_nowait, event))
    row = templates.get_template(ROW)
    try:
        for job in await asyncio.to_thread(manager.list):
            if job.active:
                yield ServerSentEvent(event=job.event_name, data=row.render(job=job))
        while True:
            event = await updates.get()
            yield ServerSentEvent(event=event.name, data=row.render(job=event.state))
    finally:
        unsubscribe()
