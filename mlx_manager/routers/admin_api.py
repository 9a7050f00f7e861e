"""The manager's part of the admin API, served by the embedded /v1 app (so API keys, audit rows
and error shapes are the server's): pulls through the dashboard's download manager, and deleting
a model as the models page does. `mlx-manager pull` and `rm` call it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

from fastapi import APIRouter
from pydantic import BaseModel, ConfigDict, Field
from sse_starlette import EventSourceResponse, ServerSentEvent

from mlx_manager.deps import RowId, SessionDep
from mlx_manager.services.download_state import DownloadRefused, DownloadState
from mlx_manager.services.downloads import get_download_manager
from mlx_manager.services.local_models import delete_model
from mlx_manager.services.pulls import PullState, follow_pull, start_pull
from mlx_server.facade import APIError, ModelNotFoundError, ModelStoreError, get_model

router = APIRouter(prefix="/admin", tags=["admin"])

PING_SECONDS = 15


class PullRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    repo_id: str = Field(min_length=1, max_length=255, description="A hub repository, e.g. org/name")
    revision: str = Field(default="main", min_length=1, max_length=255)


class ModelDeleted(BaseModel):
    id: str
    deleted: bool = True
    detail: str


def _refused(exc: DownloadRefused) -> APIError:
    return APIError(exc.status_code, exc.message)


def _download(act: Callable[..., DownloadState], *args: Any) -> DownloadState:
    try:
        state = act(*args)
    except DownloadRefused as exc:
        raise _refused(exc) from exc
    return state


@router.post("/downloads", status_code=202)
def pull(body: PullRequest) -> PullState:
    """Download a hub repository (or resume its stopped download); probed once it arrives."""
    return PullState(download=_download(start_pull, body.repo_id, body.revision))


@router.get("/downloads/{job_id}")
def get_pull(job_id: RowId) -> PullState:
    return PullState(download=_download(get_download_manager().get, job_id))


@router.post("/downloads/{job_id}/cancel")
def cancel_pull(job_id: RowId) -> PullState:
    """Stop the download; its partial files stay, and pulling the repo again resumes them."""
    return PullState(download=_download(get_download_manager().cancel, job_id))


@router.get("/downloads/{job_id}/events")
async def pull_events(job_id: RowId) -> EventSourceResponse:
    """The pull's state (JSON) at every change until it is finished: the download, then the probe."""
    _download(get_download_manager().get, job_id)  # 404 before the stream starts
    return EventSourceResponse(_events(job_id), ping=PING_SECONDS, headers={"Cache-Control": "no-cache"})


async def _events(job_id: int) -> AsyncIterator[ServerSentEvent]:
    async for state in follow_pull(job_id):
        yield ServerSentEvent(data=state.model_dump_json())


@router.delete("/models/{model_id:path}")
def remove_model(model_id: str, session: SessionDep) -> ModelDeleted:
    """Unregister a model and remove the files the app owns (refused while loaded or probed)."""
    if get_model(session, model_id) is None:
        raise ModelNotFoundError(model_id)
    try:
        detail = delete_model(session, model_id)
    except ModelStoreError as exc:
        raise APIError(409, str(exc)) from exc
    return ModelDeleted(id=model_id, detail=detail)
