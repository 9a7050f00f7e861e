"""What a download looks like to pages and subscribers, and the live progress of a running one."""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime

from mlx_manager.records import DownloadJob, DownloadStatus
from mlx_manager.services.hub import HubConfig, hub_error
from mlx_manager.services.hub_fetch import CorruptFileError, DownloadStopped
from mlx_manager.services.refusals import Refusal

ACTIVE = (DownloadStatus.QUEUED, DownloadStatus.RUNNING)
PUBLISH_INTERVAL_S = 0.25  # at most 4 updates a second per download
SAVE_INTERVAL_S = 2.0  # bytes_done written to the table this often
SPEED_WINDOW_S = 5.0
CREATED_EVENT = "download-created"


class DownloadRefused(Refusal):
    """A download request that cannot be honoured; `message` says why and what to do."""


@dataclass(frozen=True)
class DownloadState:
    """A job as the table holds it, plus speed and ETA while it runs."""

    id: int
    repo_id: str
    revision: str
    status: DownloadStatus
    bytes_done: int
    bytes_total: int | None
    error: str | None
    model_id: str | None
    created_at: datetime
    speed_bps: float | None = None
    eta_seconds: float | None = None
    # Said once, in the answer to the request (not stored): e.g. registered from the local cache.
    note: str | None = None

    @classmethod
    def of(cls, job: DownloadJob) -> DownloadState:
        assert job.id is not None, "a stored job has an id"
        return cls(
            id=job.id,
            repo_id=job.repo_id,
            revision=job.revision,
            status=DownloadStatus(job.status),
            bytes_done=job.bytes_done,
            bytes_total=job.bytes_total,
            error=job.error,
            model_id=job.model_id,
            created_at=job.created_at,
        )

    @property
    def active(self) -> bool:
        return self.status in ACTIVE

    @property
    def percent(self) -> float | None:
        if not self.bytes_total:
            return None
        return min(100.0, 100.0 * self.bytes_done / self.bytes_total)

    @property
    def event_name(self) -> str:
        """The SSE event that carries this download's updates."""
        return f"download-{self.id}"


@dataclass(frozen=True)
class DownloadEvent:
    name: str  # CREATED_EVENT, or the job's `event_name`
    state: DownloadState


Subscriber = Callable[[DownloadEvent], object]


class JobProgress:
    """`FetchProgress` for one running job: counts bytes, measures speed, reports on a throttle."""

    def __init__(
        self,
        state: DownloadState,
        stop: threading.Event,
        publish: Callable[[DownloadState], None],
        save: Callable[[DownloadState], None],
    ) -> None:
        self._state = state
        self._stop = stop
        self._publish = publish
        self._save = save
        self._done = 0
        self._total: int | None = None
        # (time, bytes received) over the last SPEED_WINDOW_S; bytes found on disk do not count.
        self._samples: deque[tuple[float, int]] = deque()
        self._received = 0
        self._published_at = 0.0
        self._saved_at = 0.0

    def started(self, total_bytes: int) -> None:
        self._total = total_bytes
        self._report(force=True)

    def found(self, n: int) -> None:
        self._done += n
        self._report()

    def advance(self, n: int) -> None:
        self._done += n
        self._received += n
        self._report()

    def check_stop(self) -> None:
        if self._stop.is_set():
            raise DownloadStopped

    def wait(self, seconds: float) -> None:
        if self._stop.wait(seconds):
            raise DownloadStopped

    def state(self) -> DownloadState:
        speed = self._speed()
        remaining = (self._total - self._done) if self._total is not None else None
        return replace(
            self._state,
            bytes_done=self._done,
            bytes_total=self._total,
            speed_bps=speed,
            eta_seconds=remaining / speed if speed and remaining is not None else None,
        )

    def _speed(self) -> float | None:
        if len(self._samples) < 2:
            return None
        (t0, b0), (t1, b1) = self._samples[0], self._samples[-1]
        return (b1 - b0) / (t1 - t0) if t1 - t0 >= 0.5 else None

    def _report(self, force: bool = False) -> None:
        now = time.monotonic()
        self._samples.append((now, self._received))
        while len(self._samples) > 2 and now - self._samples[0][0] > SPEED_WINDOW_S:
            self._samples.popleft()
        if force or now - self._published_at >= PUBLISH_INTERVAL_S:
            self._published_at = now
            self._publish(self.state())
        if force or now - self._saved_at >= SAVE_INTERVAL_S:
            self._saved_at = now
            self._save(self.state())


def failure_message(exc: Exception, state: DownloadState, config: HubConfig | None) -> str:
    """What failed and what to do, for the job's `error` column."""
    if isinstance(exc, (DownloadRefused, CorruptFileError)):
        return str(exc)
    endpoint = config.endpoint if config is not None else "the configured hub"
    error = hub_error(exc, endpoint, state.repo_id, state.revision)
    if error is not None:
        return error.message
    return (
        f"Download of {state.repo_id} failed ({type(exc).__name__}: {exc}). The files received so far are "
        "kept; resume the download to continue."
    )
