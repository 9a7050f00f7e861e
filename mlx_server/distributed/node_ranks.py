"""This machine's ranks of models that another server serves across nodes (it is the coordinator):
started, watched and stopped here at its request (/v1/admin/node/ranks, admin key).

The handshake keeps every port free on the machine that uses it: the coordinator first asks each
node to reserve its rank (the model found by id and checked by its config.json's sha256; a port
bound on the address the coordinator reached the node at, held until the start), builds the ring
hostfile from the addresses the nodes report, then sends it to each with the start. A rank here
is a subprocess of this server (it ends with it, rank.py) and is stopped on request and when this
server stops; a reservation never started is released after RESERVATION_TTL_S.
"""

from __future__ import annotations

import socket
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mlx_server.config import get_settings
from mlx_server.distributed.launcher import LocalRank, LocalRankLauncher, RankLaunch, exit_description
from mlx_server.distributed.plan import config_fingerprint
from mlx_server.errors import APIError
from mlx_server.models.loaders import read_spec

RESERVATION_TTL_S = 120.0
MAX_NODE_RANKS = 16


@dataclass(eq=False)
class NodeRank:
    id: str
    model_id: str
    path: Path
    strategy: str
    backend: str
    rank: int
    address: str  # "ip:port" it listens on
    directory: Path
    reserved_at: float
    probe: socket.socket | None  # holds the port until the start
    running: LocalRank | None = None

    def state(self) -> dict[str, Any]:
        code = self.running.exit_code if self.running is not None else None
        state = "reserved" if self.running is None else "running" if code is None else "exited"
        return {
            "id": self.id,
            "model": self.model_id,
            "rank": self.rank,
            "address": self.address,
            "state": state,
            "exit_code": code,
            "description": exit_description(code) if self.running is not None else "reserved",
            "pid": self.running.pid if self.running is not None else None,
        }


_ranks: dict[str, NodeRank] = {}
_lock = threading.Lock()


def _expire() -> None:
    """Forget reservations never started and ranks long ended."""
    now = time.time()
    for rank in list(_ranks.values()):
        ended = rank.running is not None and rank.running.exit_code is not None
        if now - rank.reserved_at > RESERVATION_TTL_S and (rank.running is None or ended):
            if rank.probe is not None:
                rank.probe.close()
            del _ranks[rank.id]


def reserve_rank(
    model_id: str, config_sha256: str, strategy: str, rank: int, backend: str, host: str
) -> dict[str, Any]:
    """Reserve a port for rank `rank` of `model_id` on `host` (this machine's address as the
    coordinator reached it); refused if the model is absent here or another copy."""
    spec = read_spec(model_id)  # 404 if this machine has no such model
    if config_fingerprint(spec.path) != config_sha256:
        raise APIError(
            409,
            f"This node's {model_id!r} is another model (its config.json differs from the coordinator's).",
            param="config_sha256",
            code="model_differs",
        )
    with _lock:
        _expire()
        if len(_ranks) >= MAX_NODE_RANKS:
            raise APIError(409, f"This node holds {MAX_NODE_RANKS} ranks already.", code="too_many_ranks")
        probe = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            probe.bind((host, 0))
        except OSError as exc:
            probe.close()
            raise APIError(409, f"No port could be reserved on {host}: {exc}.", code="no_port") from None
        rank_id = uuid.uuid4().hex[:16]
        directory = get_settings().home_dir / "cluster" / f"node-{model_id.replace('/', '--')}-{rank_id}"
        _ranks[rank_id] = NodeRank(
            rank_id, model_id, spec.path, strategy, backend, rank,
            f"{host}:{probe.getsockname()[1]}", directory, time.time(), probe,
        )  # fmt: skip
        return _ranks[rank_id].state()


def _get(rank_id: str) -> NodeRank:
    found = _ranks.get(rank_id)
    if found is None:
        raise APIError(404, f"This node has no rank {rank_id!r}.", code="rank_not_found")
    return found


def start_rank(rank_id: str, hostfile: list[list[str]]) -> dict[str, Any]:
    """Start a reserved rank with the group's hostfile (its own entry the address it reserved)."""
    with _lock:
        found = _get(rank_id)
        if found.running is not None:
            raise APIError(409, f"Rank {rank_id!r} was started already.", code="rank_started")
        if not 0 <= found.rank < len(hostfile) or hostfile[found.rank] != [found.address]:
            raise APIError(
                400,
                f"The hostfile's entry {found.rank} is not {found.address!r}, reserved here.",
                param="hostfile",
            )
        if found.probe is not None:
            found.probe.close()  # the rank binds it now
            found.probe = None
        launch = RankLaunch(
            found.rank, found.address.rsplit(":", 1)[0], found.path, found.strategy, hostfile,
            found.directory, backend=found.backend,
        )  # fmt: skip
        running = LocalRankLauncher().launch(launch, None, lambda _: None)
        assert isinstance(running, LocalRank)
        found.running = running
        return found.state()


def rank_state(rank_id: str) -> dict[str, Any]:
    return _get(rank_id).state()


def stop_rank(rank_id: str) -> dict[str, Any]:
    """End the rank (SIGTERM, SIGKILL after a grace period) or release its reservation."""
    with _lock:
        found = _get(rank_id)
        if found.probe is not None:
            found.probe.close()
            found.probe = None
        if found.running is not None:
            found.running.kill()
        else:
            del _ranks[rank_id]
        return found.state()


def stop_node_ranks() -> None:
    """This server stops: every rank it runs for a coordinator ends."""
    with _lock:
        for found in _ranks.values():
            if found.probe is not None:
                found.probe.close()
            if found.running is not None:
                found.running.kill()
        _ranks.clear()
