"""One server per home: `serve` holds an exclusive lock on <home>/serve.lock while it runs.

Two servers on one home would each size a model pool for the whole machine, each run the audit
retention and idle sweeps, and each keep pool limits saved on the other's dashboard out of its
own pool. So a second `mlx-manager serve` or `mlx-server serve` on a home in use refuses to
start, naming the process and address that hold it.

The lock is flock(2) on an open file (standard library: the filelock package truncates the file
on every attempt, so the holder could not be named). The kernel releases it when the process
ends, however it ends, kill -9 included: no stale lock to clear by hand. The file's text (pid and
URL) is only for the message. The descriptor is not inherited by child processes (PEP 446).
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path
from types import TracebackType

LOCK_FILE = "serve.lock"


class HomeInUse(Exception):
    """Another process serves this home; the message says which and what to do."""


class HomeLock:
    """Held from `lock_home` until `release` (or the end of a `with` block, or the process)."""

    def __init__(self, fd: int, path: Path) -> None:
        self.fd, self.path = fd, path

    def release(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)  # closing the descriptor drops the flock
            self.fd = -1

    def __enter__(self) -> HomeLock:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.release()


def lock_home(home: Path, url: str, home_variable: str) -> HomeLock:
    """Take the home's lock for this process serving at `url`; HomeInUse when another holds it.
    `home_variable` is the environment variable that chooses the home (for the message)."""
    home.mkdir(parents=True, exist_ok=True)
    path = home / LOCK_FILE
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.read(fd, 256).decode(errors="replace").strip() or "a process starting up"
        os.close(fd)
        raise HomeInUse(
            f"another server is already running on the home {home} ({holder}). Use that one, stop "
            f"it first, or give this one its own home with {home_variable}=/another/directory."
        ) from None
    os.ftruncate(fd, 0)
    os.write(fd, f"pid {os.getpid()} serving {url}".encode())
    return HomeLock(fd, path)
