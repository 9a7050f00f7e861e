"""A sharded model's group of ranks: formed, watched, degraded, stopped.

The group is "ready" once every rank has loaded its shard (rank 0 says so). Any rank that ends
while it serves, or a forward pass that fails or outlives its deadline (link.py), makes it
"degraded": every rank is killed (a rank blocked in a collective with a dead peer would wait
forever; the ring cannot be repaired), and requests get a 503 naming the node of the rank that
failed until `restart` forms a new group. Nothing else in the server is touched.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import threading
import time
from dataclasses import dataclass, field, replace
from enum import StrEnum
from pathlib import Path
from typing import Any

from mlx_server.distributed.launcher import (
    RankLaunch,
    RankLauncher,
    RunningRank,
)
from mlx_server.distributed.link import Rank0Link
from mlx_server.errors import APIError

logger = logging.getLogger("mlx_server.distributed")

# A client told "degraded" retries after this; the group comes back only by a restart.
DEGRADED_RETRY_AFTER_SECONDS = 30
# After a failure, how long to wait for the ranks' exits to name the one that failed first.
CULPRIT_WAIT_SECONDS = 1.0


class GroupState(StrEnum):
    STARTING = "starting"
    READY = "ready"
    DEGRADED = "degraded"
    STOPPED = "stopped"


@dataclass(eq=False)
class ShardedGroup:
    model_id: str
    path: Path
    strategy: str
    hosts: list[str]  # the node of each rank, rank 0 (this machine) first
    directory: Path  # hostfiles and logs
    launchers: list[RankLauncher]  # of each rank: this machine's or a node's (remote_launcher.py)
    timeout_s: float
    config_sha256: str = ""
    state: GroupState = GroupState.STARTING
    failure: str | None = None
    failed_host: str | None = None
    ranks: list[RunningRank] = field(default_factory=list)
    link: Rank0Link | None = None
    started_at: float = field(default_factory=time.time)
    ready: dict[str, Any] = field(default_factory=dict)  # rank 0's `ready` (wire.py)
    # One generation at a time: the ranks hold one KV cache (remote_model.py).
    turn: asyncio.Lock = field(default_factory=asyncio.Lock)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    # --- Forming (blocking: run it in a thread) ---

    def form(self, start_timeout_s: float) -> dict[str, Any]:
        """Start every rank and wait for rank 0's `ready`; on failure the group is degraded
        (its ranks killed) and the error raised."""
        launches = [
            RankLaunch(rank, host, self.path, self.strategy, [], self.directory,
                       model_id=self.model_id, config_sha256=self.config_sha256)
            for rank, host in enumerate(self.hosts)
        ]  # fmt: skip
        ours, theirs = socket.socketpair()
        self.link = Rank0Link(ours, self.timeout_s, self._broken)
        try:
            # Every rank's port, reserved on its machine, then every rank started with them all.
            placed = list(zip(self.launchers, launches, strict=True))
            hostfile = [[launcher.reserve(launch)] for launcher, launch in placed]
            for launcher, launch in placed:
                control = theirs if launch.rank == 0 else None
                launch = replace(launch, hostfile=hostfile)
                self.ranks.append(launcher.launch(launch, control, self._rank_ended))
        except OSError as exc:  # a rank could not start: the ones that did are ended
            for launcher in self.launchers:
                launcher.abandon()
            raise self.degrade(f"a rank could not start ({exc})", None) from exc
        finally:
            theirs.close()  # rank 0 has its copy
        ready = self.ready = self.link.wait_ready(start_timeout_s)
        with self._lock:
            if self.state is GroupState.STARTING:
                self.state = GroupState.READY
        self.check_available()
        return ready

    # --- Faults ---

    def _rank_ended(self, rank: RunningRank) -> None:
        if self.state in (GroupState.STARTING, GroupState.READY):
            self.degrade(f"rank {rank.rank} on node {rank.host} {rank.ending}", rank)

    def _broken(self, reason: str) -> APIError:
        return self.degrade(reason, None)

    def _culprit(self, named: RunningRank | None) -> RunningRank | None:
        """The rank that failed: one killed by a signal, or on a node that is gone, first (the
        others exit because it did), else the one named, else the first seen gone."""
        deadline = time.monotonic() + CULPRIT_WAIT_SECONDS
        while True:
            ended = [r for r in self.ranks if r.exit_code is not None]
            killed = [r for r in ended if (r.exit_code or 0) < 0 or r.lost]
            if killed:
                return killed[0]
            if time.monotonic() >= deadline:
                return named or (ended[0] if ended else None)
            time.sleep(0.05)

    def degrade(self, reason: str, rank: RunningRank | None) -> APIError:
        """Mark the group degraded (once), kill its ranks; the error requests get from now on."""
        with self._lock:
            if self.state in (GroupState.STARTING, GroupState.READY):
                self.state = GroupState.DEGRADED
                culprit = self._culprit(rank)
                if culprit is not None:
                    self.failed_host = culprit.host
                    self.failure = f"rank {culprit.rank} on node {culprit.host} {culprit.ending}"
                else:
                    self.failed_host = ", ".join(dict.fromkeys(self.hosts))
                    self.failure = reason
                logger.warning("sharded model %s is degraded: %s (%s)", self.model_id, self.failure, reason)
                self._end_ranks()
        return self.unavailable()

    def _end_ranks(self) -> None:
        if self.link is not None:
            self.link.close()
        for rank in self.ranks:
            rank.kill()

    def unavailable(self) -> APIError:
        if self.state is GroupState.STOPPED:
            return APIError(503, f"The sharded model {self.model_id!r} was stopped.", code="sharded_stopped")
        return APIError(
            503,
            f"The sharded model {self.model_id!r} is degraded: {self.failure} (node {self.failed_host}). "
            f"Restart it (POST /v1/admin/sharded/{self.model_id}/restart) once the node is back.",
            code="sharded_degraded",
            headers={"Retry-After": str(DEGRADED_RETRY_AFTER_SECONDS)},
        )

    def check_available(self) -> None:
        """Raise the error a request gets while the group cannot serve."""
        if self.state is not GroupState.READY:
            raise self.unavailable()

    # --- Stopping ---

    def close(self) -> None:
        """Stop the group: rank 0 is asked to shut it down, then every rank is ended."""
        with self._lock:
            was = self.state
            self.state = GroupState.STOPPED
        if was is GroupState.READY and self.link is not None:
            self.link.shut_down()
        self._end_ranks()

    def describe(self) -> dict[str, Any]:
        return {"strategy": self.strategy, "ranks": len(self.hosts), "nodes": list(dict.fromkeys(self.hosts))}
