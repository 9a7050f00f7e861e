"""What the server and its rank-0 worker say to each other over their socket.

A frame is a JSON header and an optional binary payload (the logits), each length-prefixed:
server -> rank 0: `forward` {offset, tokens, rows} and `shutdown`; rank 0 -> server: `ready`
{ranks, memory_bytes}, `logits` {rows, vocab} + float32 rows, `error` {message}.
Both ends use blocking sockets: the server's has a timeout (link.py), rank 0's none (it waits
for the next command as long as the server lives).
"""

from __future__ import annotations

import json
import socket
import struct
from typing import Any

_LENGTHS = struct.Struct("!II")  # header bytes, payload bytes
# A frame larger than this is not one of ours (a 1M-token prompt's header still fits).
MAX_FRAME_BYTES = 1 << 30


class LinkClosed(ConnectionError):
    """The other end closed the socket: the worker (or the server) is gone."""


def send_frame(sock: socket.socket, header: dict[str, Any], payload: bytes = b"") -> None:
    encoded = json.dumps(header, separators=(",", ":")).encode()
    sock.sendall(_LENGTHS.pack(len(encoded), len(payload)) + encoded + payload)


def _read_exactly(sock: socket.socket, size: int) -> bytes:
    chunks, left = [], size
    while left:
        chunk = sock.recv(min(left, 1 << 20))
        if not chunk:
            raise LinkClosed("the other end closed the socket")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def receive_frame(sock: socket.socket) -> tuple[dict[str, Any], bytes]:
    """The next frame; LinkClosed at the end of the stream, socket.timeout past the socket's timeout."""
    header_size, payload_size = _LENGTHS.unpack(_read_exactly(sock, _LENGTHS.size))
    if header_size + payload_size > MAX_FRAME_BYTES:
        raise LinkClosed(f"a frame of {header_size + payload_size} bytes is not one of ours")
    header = json.loads(_read_exactly(sock, header_size))
    if not isinstance(header, dict) or not isinstance(header.get("op"), str):
        raise LinkClosed(f"not a frame of ours: {header!r:.80}")
    return header, _read_exactly(sock, payload_size) if payload_size else b""
