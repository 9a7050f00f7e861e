"""Ranks on another machine (a registered node, nodes.py): the coordinator asks the node to
reserve, start and stop them (/v1/admin/node/ranks there, node_ranks.py) and watches each by
polling its state. A rank that ends there, or a node that stops answering for LOST_AFTER_S, is
told to the group like a local rank's exit (group.py degrades the model naming the node).
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

import httpx

from mlx_server.distributed.launcher import RankLaunch, RunningRank, exit_description

logger = logging.getLogger("mlx_server.distributed")

POLL_SECONDS = 0.25
LOST_AFTER_S = 5.0
REQUEST_TIMEOUT_S = 10.0
LOST_EXIT_CODE = 255  # what a rank on a node that stopped answering counts as


class RankStartError(OSError):
    """A node refused or could not start a rank (its own reason)."""


class NodeGone(RankStartError):
    """The node did not answer (`refused`: its server is gone; else it was silent)."""

    def __init__(self, message: str, refused: bool) -> None:
        super().__init__(message)
        self.refused = refused


def route_ip(url: str) -> str:
    """This machine's address on the route to the node at `url` (where its ranks listen)."""
    parts = urlsplit(url)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.connect((parts.hostname or "127.0.0.1", parts.port or 80))  # UDP: nothing is sent
        return str(probe.getsockname()[0])


class RemoteRank:
    def __init__(self, rank: int, host: str, launcher: NodeRankLauncher, rank_id: str) -> None:
        self.rank = rank
        self.host = host
        self.rank_id = rank_id
        self._launcher = launcher
        self._exit_code: int | None = None
        self.stopping = False
        self.lost = False
        self._lost_reason = ""

    @property
    def exit_code(self) -> int | None:
        return self._exit_code

    @property
    def ending(self) -> str:
        return f"was lost ({self._lost_reason})" if self.lost else exit_description(self._exit_code)

    def kill(self) -> None:
        self.stopping = True
        threading.Thread(target=self._launcher.stop, args=(self.rank_id,), daemon=True).start()

    def watch(self, on_exit: Callable[[RunningRank], None]) -> None:
        """Until it ends there (or the node is lost), then `on_exit`."""
        answered = time.monotonic()
        while True:
            time.sleep(POLL_SECONDS)
            try:
                state = self._launcher.request("GET", f"/{self.rank_id}", timeout=LOST_AFTER_S)
                answered = time.monotonic()
            except NodeGone as exc:
                # Refused: its server is gone, and its ranks with it. Silent: give it LOST_AFTER_S.
                if not exc.refused and time.monotonic() - answered < LOST_AFTER_S and not self.stopping:
                    continue
                self.lost, self._lost_reason = True, str(exc)
                state = {"state": "exited", "exit_code": LOST_EXIT_CODE}
            except RankStartError as exc:  # it answers, but no longer knows the rank
                self.lost, self._lost_reason = True, str(exc)
                state = {"state": "exited", "exit_code": LOST_EXIT_CODE}
            if state["state"] == "exited":
                self._exit_code = int(state["exit_code"])
                level = logging.INFO if self.stopping else logging.WARNING
                logger.log(level, "rank %d on node %s %s", self.rank, self.host, self.ending)
                on_exit(self)
                return


class NodeRankLauncher:
    """Ranks on the node `name` (its URL and admin key from its registration)."""

    def __init__(self, name: str, url: str, api_key: str) -> None:
        self.name = name
        self.url = url.rstrip("/")
        self._headers = {"Authorization": f"Bearer {api_key}"}
        self._reserved: dict[int, str] = {}

    def request(self, method: str, path: str, body: Any = None, timeout: float = REQUEST_TIMEOUT_S) -> Any:
        try:
            response = httpx.request(
                method, f"{self.url}/v1/admin/node/ranks{path}", json=body, headers=self._headers,
                timeout=timeout, trust_env=False,
            )  # fmt: skip
        except httpx.TimeoutException:
            raise NodeGone(f"node {self.name} did not answer within {timeout:g} s", refused=False) from None
        except httpx.HTTPError as exc:
            reason = exc or type(exc).__name__
            # Refused, or the connection dropped mid-answer: its server is gone (not merely slow).
            raise NodeGone(f"node {self.name} ({self.url}) cannot be reached: {reason}", True) from None
        if response.status_code != 200:
            try:
                reason = response.json()["error"]["message"]
            except (ValueError, KeyError, TypeError):
                reason = response.text[:300]
            raise RankStartError(f"node {self.name} answered {response.status_code}: {reason}")
        return response.json()

    def reserve(self, launch: RankLaunch) -> str:
        body = {
            "model": launch.model_id, "config_sha256": launch.config_sha256,
            "strategy": launch.strategy, "rank": launch.rank, "backend": launch.backend,
        }  # fmt: skip
        reserved = self.request("POST", "", body)
        self._reserved[launch.rank] = str(reserved["id"])
        return str(reserved["address"])

    def launch(
        self, launch: RankLaunch, control: socket.socket | None, on_exit: Callable[[RunningRank], None]
    ) -> RunningRank:
        assert control is None, "rank 0 runs on this machine"
        rank_id = self._reserved.pop(launch.rank)
        self.request("POST", f"/{rank_id}/start", {"hostfile": launch.hostfile})
        rank = RemoteRank(launch.rank, launch.host, self, rank_id)
        name = f"watch rank {launch.rank}"
        threading.Thread(target=rank.watch, args=(on_exit,), name=name, daemon=True).start()
        logger.info("started rank %d of %s on node %s (%s)", launch.rank, launch.model_id, self.name, rank_id)
        return rank

    def abandon(self) -> None:
        for rank_id in self._reserved.values():
            self.stop(rank_id)
        self._reserved.clear()

    def stop(self, rank_id: str) -> None:
        try:
            self.request("DELETE", f"/{rank_id}")
        except RankStartError as exc:
            logger.warning("could not stop rank %s on node %s: %s", rank_id, self.name, exc)
