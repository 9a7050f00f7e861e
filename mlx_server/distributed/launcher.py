"""Where a sharded model's ranks run, and how they are started, watched and stopped.

A rank is `python -m mlx_server.distributed.rank` with the environment `mlx.launch` sets for
the ring backend (MLX_RANK, MLX_HOSTFILE: per rank, the "ip:port" it listens on). This
machine's ranks are subprocesses of the server (`LocalRankLauncher`); their exit is noticed at
once by a thread that waits on each and told to the group (group.py). No rank outlives the
server: the group kills its ranks when it degrades or stops, and each rank ends itself when its
parent is gone (rank.py).
"""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

logger = logging.getLogger("mlx_server.distributed")

STOP_GRACE_SECONDS = 3.0


@dataclass(frozen=True)
class RankLaunch:
    """What one rank needs: its place in the group and the model's directory where it runs."""

    rank: int
    host: str  # the node it runs on (named in errors)
    model_path: Path
    strategy: str
    hostfile: list[list[str]]
    directory: Path  # its hostfile and log
    backend: str = "ring"
    model_id: str = ""  # a node finds its copy by id
    config_sha256: str = ""  # and checks it is the same model


class RunningRank(Protocol):
    rank: int
    host: str
    lost: bool  # its node stopped answering (remote_launcher.py): it counts as ended

    @property
    def exit_code(self) -> int | None:
        """None while it runs."""

    @property
    def ending(self) -> str:
        """How it ended, for the group's failure ("killed by SIGKILL"), or "running"."""

    def kill(self) -> None:
        """End it now (SIGTERM, SIGKILL after a grace period); returns at once."""


class RankLauncher(Protocol):
    def reserve(self, launch: RankLaunch) -> str:
        """The "ip:port" the rank will listen on, its port held free until `launch` (whose
        `launch.hostfile` has every rank's)."""

    def launch(
        self, launch: RankLaunch, control: socket.socket | None, on_exit: Callable[[RunningRank], None]
    ) -> RunningRank:
        """Start one rank (rank 0 gets `control`, the worker's end of its socket); `on_exit` is
        called from another thread when it ends."""

    def abandon(self) -> None:
        """Release the ports reserved for ranks that will not be launched (a failed start)."""


def exit_description(code: int | None) -> str:
    if code is None:
        return "running"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exited with code {code}"


class LocalRank:
    def __init__(self, rank: int, host: str, process: subprocess.Popen[bytes], log: Path) -> None:
        self.rank = rank
        self.host = host
        self.process = process
        self.log = log
        self.stopping = False
        self.lost = False

    @property
    def exit_code(self) -> int | None:
        return self.process.poll()

    @property
    def ending(self) -> str:
        return exit_description(self.exit_code)

    @property
    def pid(self) -> int:
        return self.process.pid

    def kill(self) -> None:
        self.stopping = True
        if self.process.poll() is not None:
            return

        def stop() -> None:
            try:
                self.process.terminate()
                self.process.wait(STOP_GRACE_SECONDS)
            except subprocess.TimeoutExpired:
                self.process.kill()
            except ProcessLookupError:
                pass

        threading.Thread(target=stop, name=f"stop rank {self.rank}", daemon=True).start()

    def log_tail(self, lines: int = 5) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").strip().splitlines()[-lines:])
        except OSError:
            return ""


class LocalRankLauncher:
    """Ranks on this machine: subprocesses of the server, listening on `ip`."""

    def __init__(self, ip: str = "127.0.0.1") -> None:
        self.ip = ip
        self._probes: dict[int, socket.socket] = {}

    def reserve(self, launch: RankLaunch) -> str:
        probe = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            probe.bind((self.ip, 0))
        except OSError:
            probe.close()
            raise
        self._probes[launch.rank] = probe
        return f"{self.ip}:{probe.getsockname()[1]}"

    def abandon(self) -> None:
        for probe in self._probes.values():
            probe.close()
        self._probes.clear()

    def launch(
        self, launch: RankLaunch, control: socket.socket | None, on_exit: Callable[[RunningRank], None]
    ) -> RunningRank:
        probe = self._probes.pop(launch.rank, None)
        if probe is not None:
            probe.close()  # the rank binds its port now
        launch.directory.mkdir(parents=True, exist_ok=True)
        hostfile = launch.directory / "hostfile.json"
        hostfile.write_text(json.dumps(launch.hostfile))
        log = launch.directory / f"rank{launch.rank}.log"
        command = [
            sys.executable, "-m", "mlx_server.distributed.rank",
            "--model", str(launch.model_path), "--strategy", launch.strategy, "--backend", launch.backend,
        ]  # fmt: skip
        fds: tuple[int, ...] = ()
        if control is not None:
            command += ["--control-fd", str(control.fileno())]
            fds = (control.fileno(),)
        env = {**os.environ, "MLX_RANK": str(launch.rank), "MLX_HOSTFILE": str(hostfile)}
        with log.open("ab") as out:
            process = subprocess.Popen(
                command, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=out, pass_fds=fds
            )
        rank = LocalRank(launch.rank, launch.host, process, log)

        def watch() -> None:
            code = process.wait()
            level = logging.INFO if rank.stopping or code == 0 else logging.WARNING
            logger.log(level, "rank %d (pid %d) %s", rank.rank, process.pid, exit_description(code))
            on_exit(rank)

        threading.Thread(target=watch, name=f"watch rank {launch.rank}", daemon=True).start()
        logger.info("started rank %d of %s (pid %d)", launch.rank, launch.model_path.name, process.pid)
        return rank
