"""Events per key over a sliding window, for limits such as requests per minute or failed logins."""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Hashable


class SlidingWindow:
    """The times of each key's events during the last `window_s` seconds (monotonic clock)."""

    def __init__(self, window_s: float) -> None:
        self.window_s = window_s
        self._lock = threading.Lock()
        self._events: dict[Hashable, deque[float]] = {}

    def _recent(self, key: Hashable, now: float) -> deque[float]:
        events = self._events.setdefault(key, deque())
        while events and events[0] <= now - self.window_s:
            events.popleft()
        return events

    def wait_s(self, key: Hashable, limit: int, now: float | None = None) -> float | None:
        """Seconds until `key` has fewer than `limit` events in the window, or None if it has."""
        now = time.monotonic() if now is None else now
        with self._lock:
            events = self._recent(key, now)
            return None if len(events) < limit else events[0] + self.window_s - now

    def add(self, key: Hashable, now: float | None = None) -> None:
        now = time.monotonic() if now is None else now
        with self._lock:
            self._recent(key, now).append(now)

    def admit(self, key: Hashable, limit: int, now: float | None = None) -> float | None:
        """Count an event if `key` is under `limit` (None), else return the seconds to wait."""
        now = time.monotonic() if now is None else now
        with self._lock:
            events = self._recent(key, now)
            if len(events) >= limit:
                return events[0] + self.window_s - now
            events.append(now)
            return None

    def forget(self, key: Hashable) -> None:
        with self._lock:
            self._events.pop(key, None)

    def clear(self) -> None:
        with self._lock:
            self._events.clear()
