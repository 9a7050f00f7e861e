"""A circuit breaker per remote backend (blueprint §13.2), kept in memory by this process.

closed: requests go through; N failures or timeouts in a row open it.
open: requests skip the backend until the cool-down has passed.
half-open: after the cool-down one request probes the backend; success closes it, failure
opens it again for another cool-down. Settings: MLX_SERVER_REMOTE_BREAKER_FAILURES and
MLX_SERVER_REMOTE_BREAKER_COOLDOWN_SECONDS.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from enum import StrEnum

from mlx_server.config import get_settings


class BreakerState(StrEnum):
    CLOSED = "closed"
    OPEN = "open"
    HALF_OPEN = "half-open"


@dataclass
class CircuitBreaker:
    failures: int = 0
    opened_at: float | None = None
    probing: bool = False
    last_error: str | None = None

    @property
    def state(self) -> BreakerState:
        if self.opened_at is None:
            return BreakerState.CLOSED
        if self.probing or self.retry_after() == 0:
            return BreakerState.HALF_OPEN
        return BreakerState.OPEN

    def retry_after(self) -> float:
        """Seconds until an open circuit lets a probe through (0 when it would now)."""
        if self.opened_at is None:
            return 0.0
        cooldown = get_settings().remote_breaker_cooldown_seconds
        return max(0.0, self.opened_at + cooldown - time.monotonic())

    def try_acquire(self) -> bool:
        """Whether a request may go to the backend now (taking the probe's turn when half-open)."""
        state = self.state
        if state is BreakerState.CLOSED:
            return True
        if state is BreakerState.HALF_OPEN and not self.probing:
            self.probing = True
            return True
        return False

    def succeeded(self) -> None:
        self.failures, self.opened_at, self.probing, self.last_error = 0, None, False, None

    def abandoned(self) -> None:
        """The request gave up before an outcome (cancelled): another may probe."""
        self.probing = False

    def failed(self, error: str) -> None:
        self.failures += 1
        self.last_error = error
        if self.probing or self.failures >= get_settings().remote_breaker_failures:
            self.opened_at = time.monotonic()
        self.probing = False

    def status(self) -> dict[str, object]:
        return {
            "state": self.state.value,
            "consecutive_failures": self.failures,
            "retry_after_s": round(self.retry_after(), 3) if self.state is BreakerState.OPEN else None,
            "last_error": self.last_error,
        }


_breakers: dict[str, CircuitBreaker] = {}
_lock = threading.Lock()


def breaker(backend: str) -> CircuitBreaker:
    """The breaker of the backend named `backend` (created closed)."""
    with _lock:
        return _breakers.setdefault(backend, CircuitBreaker())


def forget_breaker(backend: str) -> None:
    with _lock:
        _breakers.pop(backend, None)


def reset_breakers() -> None:
    with _lock:
        _breakers.clear()
