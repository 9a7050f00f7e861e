"""Background hub downloads: jobs in the `download_jobs` table, run on worker threads.

A job depends on no request or browser: `submit` stores it as queued and returns; a worker thread
fetches the snapshot (`hub_fetch.fetch_snapshot`), reports progress to subscribers (the SSE
endpoint) at most four times a second and to the table every two seconds, and on success writes
the `ModelRecord` and the completed status in one transaction, so a model is registered once or
not at all. Jobs still queued or running when the app starts (a crash, a kill) are resumed; a
graceful shutdown stops transfers and leaves them queued. Partial files stay on disk, so a
resumed job continues them with Range requests.
"""

from __future__ import annotations

import asyncio
import inspect
import itertools
import logging
import threading
from collections.abc import AsyncIterator, Callable
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import asynccontextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from sqlmodel import Session, col, select

from mlx_manager.records import DownloadJob, DownloadStatus
from mlx_manager.services.download_state import (
    ACTIVE,
    CREATED_EVENT,
    DownloadEvent,
    DownloadRefused,
    DownloadState,
    JobProgress,
    Subscriber,
    failure_message,
)
from mlx_manager.services.hub import (
    HubConfig,
    HubError,
    check_repo,
    check_repo_id,
    load_hub_config,
)
from mlx_manager.services.hub_cache import CACHED_NOTE, cached_snapshot
from mlx_manager.services.hub_fetch import DownloadStopped, Snapshot, fetch_snapshot
from mlx_manager.services.jobs import Job, JobRegistry, JobRunning
from mlx_manager.services.settings_store import Setting, get_setting
from mlx_server.facade import ModelRecord, ModelSource, background_session, get_model, utcnow

logger = logging.getLogger("mlx_manager.downloads")

MAX_PARALLEL_DOWNLOADS = 2
CANCEL_WAIT_S = 10.0


@dataclass(frozen=True)
class CompletedDownload:
    job_id: int
    repo_id: str
    model_id: str
    path: Path


# Runs on the download's worker thread; a coroutine it returns is run on the app's event loop.
CompletionHook = Callable[[CompletedDownload], object]

_completion_hooks: list[tuple[CompletionHook, Setting[bool] | None]] = []


def add_completion_hook(hook: CompletionHook, *, enabled_by: Setting[bool] | None = None) -> None:
    """Call `hook` after every completed download (e.g. the probe, `enabled_by=AUTO_PROBE`)."""
    _completion_hooks.append((hook, enabled_by))


def remove_completion_hook(hook: CompletionHook) -> None:
    _completion_hooks[:] = [(h, s) for h, s in _completion_hooks if h != hook]


@dataclass(eq=False)
class DownloadRun(Job[int]):
    """One scheduling of a stored job (`key`: its id) on a worker: queued until a worker claims
    it, then its live progress; `stop` cancels it (or, at shutdown, leaves it queued)."""

    progress: JobProgress | None = field(default=None, repr=False)


class DownloadManager:
    def __init__(self, max_parallel: int = MAX_PARALLEL_DOWNLOADS) -> None:
        self._executor = ThreadPoolExecutor(max_workers=max_parallel, thread_name_prefix="download")
        self._lock = threading.RLock()
        self._runs = JobRegistry[int, DownloadRun]()  # scheduled jobs, and their progress once claimed
        self._subscribers: dict[int, Subscriber] = {}
        self._subscriber_keys = itertools.count()
        self._stopping = False
        self._loop: asyncio.AbstractEventLoop | None = None

    def start(self, loop: asyncio.AbstractEventLoop | None = None) -> list[int]:
        """Resume the jobs a previous run left queued or running; returns their ids."""
        self._loop = loop or self._loop
        with background_session() as session:
            query = select(DownloadJob.id).where(col(DownloadJob.status).in_(ACTIVE))
            ids = [job_id for job_id in session.exec(query) if job_id is not None]
        for job_id in ids:
            self._schedule(job_id)
        if ids:
            logger.info("resuming downloads %s", ids)
        return ids

    def shutdown(self) -> None:
        """Stop every transfer (they stay queued, to resume at next start) and join the workers."""
        with self._lock:
            self._stopping = True
            self._runs.stop_all()
        self._executor.shutdown(wait=True, cancel_futures=True)

    def submit(self, repo_id: str, revision: str = "main") -> DownloadState:
        """Queue a download of `repo_id`; an active one for the same repo is returned instead."""
        try:
            repo_id = check_repo_id(repo_id)
            with background_session() as session:
                active = self._active_job(session, repo_id)
                config = load_hub_config(session)
            if active is not None:
                return self.get(active)
            self._refuse_duplicate(repo_id)
            if (cached := cached_snapshot(config, repo_id, revision or "main")) is None:
                check_repo(config, repo_id, revision)
        except HubError as exc:
            raise DownloadRefused(exc.status_code, exc.message) from exc
        with self._lock, background_session() as session:
            active = self._active_job(session, repo_id)  # another request may have queued it meanwhile
            if active is not None:
                return self.get(active)
            job = DownloadJob(repo_id=repo_id, revision=revision or "main")
            session.add(job)
            session.commit()
            state = DownloadState.of(job)
        self._publish(state, CREATED_EVENT)
        if cached is not None:
            return self._complete_from_cache(state.id, cached)
        self._schedule(state.id)
        return state

    def _complete_from_cache(self, job_id: int, snapshot: Snapshot) -> DownloadState:
        """Its files are complete in the hub cache already: registered at once, no network."""
        self._run_hooks(self._register(job_id, snapshot))
        return replace(self.get(job_id), note=CACHED_NOTE.format(path=snapshot.path))

    def cancel(self, job_id: int) -> DownloadState:
        """Stop a queued or running job; its partial files stay for a later resume."""
        with self._lock:
            state = self.get(job_id)
            if not state.active:
                raise DownloadRefused(
                    409, f"Download {job_id} is {state.status}; only queued or running ones can be cancelled."
                )
            run = self._runs.running(job_id)
            if run is not None:
                run.stop.set()
            if run is None or run.progress is None:  # no worker has it yet: settle it here
                if run is not None:
                    run.end()
                self._update(job_id, status=DownloadStatus.CANCELLED)
                run = None
        if run is not None:
            run.wait_ended(CANCEL_WAIT_S)
        return self.get(job_id)

    def resume(self, job_id: int) -> DownloadState:
        """Queue a failed or cancelled job again; it continues from the files on disk."""
        with self._lock:
            state = self.get(job_id)
            if state.status not in (DownloadStatus.FAILED, DownloadStatus.CANCELLED):
                raise DownloadRefused(
                    409, f"Download {job_id} is {state.status}; only failed or cancelled ones can be resumed."
                )
            if self._runs.running(job_id) is not None:
                raise DownloadRefused(409, f"Download {job_id} is still stopping; try again in a moment.")
            self._refuse_duplicate(state.repo_id)
            with background_session() as session:
                if self._active_job(session, state.repo_id) is not None:
                    raise DownloadRefused(409, f"{state.repo_id} is already being downloaded by another job.")
            self._update(job_id, status=DownloadStatus.QUEUED, error=None)
        self._schedule(job_id)
        return self.get(job_id)

    def get(self, job_id: int) -> DownloadState:
        live = self._live(job_id)
        if live is not None:
            return live.state()
        with background_session() as session:
            job = session.get(DownloadJob, job_id)
            if job is None:
                raise DownloadRefused(404, f"There is no download {job_id}; GET /downloads lists them.")
            return DownloadState.of(job)

    def list(self, limit: int = 50) -> list[DownloadState]:
        """Recent jobs, newest first, with live progress for running ones."""
        with background_session() as session:
            jobs = session.exec(select(DownloadJob).order_by(col(DownloadJob.id).desc()).limit(limit)).all()
            states = [DownloadState.of(job) for job in jobs]
        return [live.state() if (live := self._live(s.id)) else s for s in states]

    def subscribe(self, subscriber: Subscriber) -> Callable[[], None]:
        """Call `subscriber` (from worker threads) with every event; returns the unsubscribe."""
        with self._lock:
            key = next(self._subscriber_keys)
            self._subscribers[key] = subscriber

        def unsubscribe() -> None:
            self._subscribers.pop(key, None)

        return unsubscribe

    # Workers

    def _live(self, job_id: int) -> JobProgress | None:
        """The progress of the job while a worker runs it."""
        run = self._runs.running(job_id)
        return run.progress if run is not None else None

    def _schedule(self, job_id: int) -> None:
        with self._lock:
            if self._stopping:
                return
            try:
                self._runs.start_in(self._executor, DownloadRun(job_id), self._run)
            except JobRunning:
                return  # already scheduled

    def _run(self, run: DownloadRun) -> None:
        progress = self._claim(run)
        if progress is not None:
            self._download(run.key, progress)

    def _claim(self, run: DownloadRun) -> JobProgress | None:
        """Mark the job running, unless it was cancelled (or finished) before a worker got to it."""
        job_id = run.key
        with self._lock:
            if run.stop.is_set() or run.finished:
                return None
            with background_session() as session:
                job = session.get(DownloadJob, job_id)
                if job is None or job.status not in ACTIVE:
                    return None
            state = self._update(job_id, publish=False, status=DownloadStatus.RUNNING, error=None)
            run.progress = JobProgress(state, run.stop, self._publish, self._save_progress)
        self._publish(state)
        return run.progress

    def _download(self, job_id: int, progress: JobProgress) -> None:
        state = progress.state()
        config: HubConfig | None = None
        try:
            with background_session() as session:
                config = load_hub_config(session)
            snapshot = fetch_snapshot(config, state.repo_id, state.revision, progress)
            done = self._register(job_id, snapshot)
        except DownloadStopped:
            # Shutting down: leave it queued so the next start resumes it.
            status = DownloadStatus.QUEUED if self._stopping else DownloadStatus.CANCELLED
            self._update(job_id, status=status, bytes_done=progress.state().bytes_done)
            return
        except Exception as exc:
            message = failure_message(exc, state, config)
            logger.warning("download %s of %s failed: %s", job_id, state.repo_id, message, exc_info=exc)
            self._update(
                job_id, status=DownloadStatus.FAILED, error=message, bytes_done=progress.state().bytes_done
            )
            return
        self._run_hooks(done)

    def _register(self, job_id: int, snapshot: Snapshot) -> CompletedDownload:
        """The model row and the completed status, in one transaction."""
        with background_session() as session:
            job = session.get(DownloadJob, job_id)
            assert job is not None
            record = get_model(session, job.repo_id)
            if record is None:
                record = ModelRecord(id=job.repo_id, source=ModelSource.HUB, path="", origin=job.repo_id)
            elif record.source != ModelSource.HUB or record.origin != job.repo_id:
                raise DownloadRefused(
                    409,
                    f"A model named {job.repo_id} already exists ({record.source}, {record.path}). The files "
                    f"are in {snapshot.path}; delete that model and resume this download to register them.",
                )
            # A repeated completion (e.g. after a crash) updates the one row; it never adds a second.
            record.path, record.size_bytes = str(snapshot.path), snapshot.size_bytes
            job.status, job.model_id, job.error = DownloadStatus.COMPLETED, record.id, None
            job.bytes_done = job.bytes_total = snapshot.size_bytes
            job.updated_at = utcnow()
            session.add(record)
            session.add(job)
            session.commit()
            state = DownloadState.of(job)
        self._publish(state)
        assert state.model_id is not None
        return CompletedDownload(job_id, state.repo_id, state.model_id, snapshot.path)

    def _run_hooks(self, done: CompletedDownload) -> None:
        for hook, enabled_by in list(_completion_hooks):
            try:
                if enabled_by is not None:
                    with background_session() as session:
                        if not get_setting(session, enabled_by):
                            continue
                result = hook(done)
                if inspect.iscoroutine(result):
                    if self._loop is None:
                        result.close()
                        raise RuntimeError(
                            "an async completion hook needs the app's event loop (start(loop))"
                        )
                    asyncio.run_coroutine_threadsafe(result, self._loop).add_done_callback(_log_crash)
            except Exception:
                logger.exception("completion hook %r failed for %s", hook, done.model_id)

    # Storage and events

    def _active_job(self, session: Session, repo_id: str) -> int | None:
        query = select(DownloadJob.id).where(
            DownloadJob.repo_id == repo_id, col(DownloadJob.status).in_(ACTIVE)
        )
        return session.exec(query).first()

    def _refuse_duplicate(self, repo_id: str) -> None:
        with background_session() as session:
            record = get_model(session, repo_id)
        if record is not None:
            raise DownloadRefused(
                409,
                f"{repo_id} is already downloaded (model {record.id} in {record.path}); "
                "delete it to download it again.",
            )

    def _update(self, job_id: int, *, publish: bool = True, **fields: object) -> DownloadState:
        """Set `fields` on the job's row (and tell subscribers)."""
        with background_session() as session:
            job = session.get(DownloadJob, job_id)
            assert job is not None, f"download {job_id} vanished"
            for name, value in fields.items():
                setattr(job, name, value)
            job.updated_at = utcnow()
            session.add(job)
            session.commit()
            state = DownloadState.of(job)
        if publish:
            self._publish(state)
        return state

    def _save_progress(self, state: DownloadState) -> None:
        self._update(state.id, publish=False, bytes_done=state.bytes_done, bytes_total=state.bytes_total)

    def _publish(self, state: DownloadState, name: str | None = None) -> None:
        event = DownloadEvent(name or state.event_name, state)
        for key, subscriber in list(self._subscribers.items()):
            try:
                subscriber(event)
            except Exception:
                logger.exception("download subscriber failed; unsubscribing it")
                self._subscribers.pop(key, None)


def _log_crash(future: Future[Any]) -> None:
    if not future.cancelled() and future.exception() is not None:
        logger.error("download task failed", exc_info=future.exception())


_manager: DownloadManager | None = None
_manager_lock = threading.Lock()


def get_download_manager() -> DownloadManager:
    global _manager
    with _manager_lock:
        if _manager is None:
            _manager = DownloadManager()
        return _manager


def reset_download_manager() -> None:
    """Forget the manager (after `shutdown`); the next `get_download_manager()` makes a new one."""
    global _manager
    with _manager_lock:
        _manager = None


@asynccontextmanager
async def download_services() -> AsyncIterator[DownloadManager]:
    """For the app's lifespan: resume interrupted downloads; on exit stop and join the workers."""
    manager = get_download_manager()
    manager.start(asyncio.get_running_loop())
    try:
        yield manager
    finally:
        await asyncio.to_thread(manager.shutdown)
        reset_download_manager()
