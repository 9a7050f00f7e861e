"""`python -m mlx_server.distributed.rank`: one rank of a sharded model, in a process of its own.

Started by the server that serves the model (launcher.py), with the environment MLX's launcher
(`mlx.launch --backend ring`) sets: MLX_RANK, and MLX_HOSTFILE naming a JSON file that lists,
per rank, the "ip:port" addresses it listens on. Rank 0 also gets the file descriptor of its
socket to the server (wire.py) and answers the server's forward passes; the others follow
rank 0 (lockstep.py).

The process ends when the group shuts down, when a collective fails (a rank is gone: the ring
cannot be repaired, the server forms a new group), or when the server that started it is gone.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import socket
import sys
import threading
import time
from pathlib import Path
from typing import Any

logger = logging.getLogger("mlx_server.distributed.rank")

PARENT_POLL_SECONDS = 0.5


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m mlx_server.distributed.rank")
    parser.add_argument("--model", required=True, type=Path, help="the model's directory on this machine")
    parser.add_argument("--strategy", required=True, choices=("tensor", "pipeline"))
    parser.add_argument("--backend", default="ring")
    parser.add_argument("--control-fd", type=int, help="rank 0: its socket to the server")
    return parser.parse_args(argv)


def _exit_with_parent() -> None:
    """A rank never outlives the server that started it: a follower blocked in a collective
    would otherwise wait forever."""
    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(PARENT_POLL_SECONDS)
        os._exit(3)

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


def _serve(lockstep: Any, control: socket.socket) -> None:
    """Rank 0: the server's forward passes, one at a time, until it shuts the group down or
    goes away."""
    import numpy as np

    from mlx_server.distributed.lockstep import CommandRefused
    from mlx_server.distributed.wire import LinkClosed, receive_frame, send_frame

    while True:
        try:
            message, _ = receive_frame(control)
        except LinkClosed:
            message = {"op": "shutdown"}
        if message["op"] == "shutdown":
            lockstep.shutdown()
            return
        try:
            logits = lockstep.forward(int(message["offset"]), list(message["tokens"]), int(message["rows"]))
        except CommandRefused as exc:
            send_frame(control, {"op": "refused", "message": str(exc)})
            continue
        rows = np.asarray(logits, dtype=np.float32)
        send_frame(control, {"op": "logits", "rows": rows.shape[0], "vocab": rows.shape[1]}, rows.tobytes())


def main(argv: list[str] | None = None) -> int:
    args = _arguments(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s rank %(process)d %(levelname)s %(message)s")
    _exit_with_parent()
    import mlx.core as mx

    from mlx_server.distributed.lockstep import Lockstep
    from mlx_server.distributed.shard_load import load_shard
    from mlx_server.distributed.wire import send_frame
    from mlx_server.utils.memory import activation_bytes

    control = socket.socket(fileno=args.control_fd) if args.control_fd is not None else None
    try:
        group = mx.distributed.init(backend=args.backend, strict=True)
        logger.info("rank %d of %d: loading %s (%s)", group.rank(), group.size(), args.model, args.strategy)
        lockstep = Lockstep(load_shard(args.model, args.strategy, group), group)
        if control is None:
            lockstep.follow()
            return 0
        ready = {
            "op": "ready",
            "ranks": group.size(),
            "memory_bytes": mx.get_active_memory(),
            "activation_bytes": activation_bytes(lockstep.model),  # the KV cache's bytes per value
        }
        send_frame(control, ready)
        _serve(lockstep, control)
        return 0
    except Exception as exc:  # the group is broken (or never formed): say why, then end
        logger.exception("rank failed")
        if control is not None:
            with contextlib.suppress(OSError):
                send_frame(control, {"op": "error", "message": str(exc) or type(exc).__name__})
        return 1


if __name__ == "__main__":
    sys.exit(main())
