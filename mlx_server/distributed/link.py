"""The server's end of rank 0's socket (wire.py), used on the MLX thread: every wait has a deadline.

A socket pair made before rank 0 starts: the worker gets one end as an inherited file
descriptor, the server keeps the other. When the worker ends, for whatever reason, the socket
ends too; when any rank ends, the group closes the socket (group.py), which wakes a forward
pass waiting on it at once; when the group stops answering, the deadline ends the wait. Either
way the caller gets the group's "degraded" error (`on_broken`), never a hang.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Callable
from typing import Any

import numpy as np

from mlx_server.distributed.wire import LinkClosed, receive_frame, send_frame
from mlx_server.errors import APIError


class Rank0Link:
    def __init__(self, sock: socket.socket, timeout_s: float, on_broken: Callable[[str], APIError]) -> None:
        self._socket = sock
        self.timeout_s = timeout_s
        self._on_broken = on_broken
        self._lock = threading.Lock()  # one exchange at a time
        self.closed = False

    def _exchange(self, header: dict[str, Any] | None, timeout_s: float) -> tuple[dict[str, Any], bytes]:
        if self.closed:
            raise self._on_broken("its socket to rank 0 is closed")
        try:
            self._socket.settimeout(timeout_s)
            if header is not None:
                send_frame(self._socket, header)
            answer, payload = receive_frame(self._socket)
        except TimeoutError:
            raise self._on_broken(f"rank 0 did not answer within {timeout_s:g} s") from None
        except (LinkClosed, OSError) as exc:
            raise self._on_broken(f"rank 0's socket closed ({exc})") from None
        if answer["op"] == "error":
            raise self._on_broken(f"rank 0 failed: {answer.get('message')}")
        return answer, payload

    def wait_ready(self, timeout_s: float) -> dict[str, Any]:
        """Rank 0's `ready` (every rank has its shard), within `timeout_s`."""
        with self._lock:
            answer, _ = self._exchange(None, timeout_s)
        return answer

    def forward(self, offset: int, tokens: list[int], rows: int) -> np.ndarray[Any, np.dtype[np.float32]]:
        """The group's logits (rows x vocabulary) of the last `rows` of `tokens`, fed after the
        first `offset` tokens of its KV cache."""
        with self._lock:
            header = {"op": "forward", "offset": offset, "tokens": tokens, "rows": rows}
            answer, payload = self._exchange(header, self.timeout_s)
        if answer["op"] == "refused":
            raise APIError(500, f"The sharded model refused a forward pass: {answer.get('message')}")
        logits = np.frombuffer(payload, dtype=np.float32)
        return logits.reshape(int(answer["rows"]), int(answer["vocab"]))

    def shut_down(self) -> None:
        """Ask rank 0 to end the group (best effort: it may be gone), then close the socket."""
        if not self.closed:
            try:
                self._socket.settimeout(0.5)
                send_frame(self._socket, {"op": "shutdown"})
            except OSError:
                pass
        self.close()

    def close(self) -> None:
        """Close the socket; a forward pass waiting on it (another thread) ends at once."""
        self.closed = True
        with contextlib.suppress(OSError):
            self._socket.shutdown(socket.SHUT_RDWR)
        self._socket.close()
