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
import re
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from urllib.parse import urlsplit, urlunsplit

LOCK_FILE = "serve.lock"
_HOLDER = re.compile(r"pid (\d+) serving (\S+)")
# What a client dials for a server bound to every address.
_WILDCARDS = {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}


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


@dataclass(frozen=True)
class ServingProcess:
    """The process that holds a home's lock, as its lock file names it."""

    pid: int
    url: str  # as `serve` bound it, e.g. http://0.0.0.0:8080

    @property
    def client_url(self) -> str:
        """The URL a client on this machine dials (a wildcard bind reached through loopback)."""
        parts = urlsplit(self.url)
        host = parts.hostname or ""
        host = _WILDCARDS.get(host, host)
        netloc = f"[{host}]" if ":" in host else host
        return urlunsplit((parts.scheme, f"{netloc}:{parts.port}" if parts.port else netloc, "", "", ""))


def serving_process(home: Path) -> ServingProcess | None:
    """The process serving `home` (pid and URL from its lock file), or None when none runs: no
    lock file, or its process has ended (the file outlives it; the lock does not)."""
    try:
        text = (home / LOCK_FILE).read_text(errors="replace")
    except OSError:
        return None
    match = _HOLDER.fullmatch(text.strip())
    if match is None:
        return None
    pid = int(match.group(1))
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except PermissionError:
        pass  # alive, another user's
    return ServingProcess(pid=pid, url=_bracketed(match.group(2)))


def _bracketed(url: str) -> str:
    """`serve` writes http://HOST:PORT with the host as given: an IPv6 address gets its brackets."""
    scheme, _, rest = url.partition("://")
    host, _, port = rest.rpartition(":")
    if ":" in host and not host.startswith("["):
        return f"{scheme}://[{host}]:{port}"
    return url
