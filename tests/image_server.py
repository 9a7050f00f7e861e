"""A local HTTP server for image-fetching tests, on 127.0.0.1 (or another loopback address).

Plain http, or https with a given server context. Routes are set per path: a status, headers
and a body (bytes, or a size to stream as zeros in 64 KiB pieces until the client hangs up).
Every request's path and Host header is recorded, and the bytes the server managed to send per
path are counted."""

from __future__ import annotations

import ssl
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any

from tests.support import LocalHTTPServer

PIECE = 64 * 1024


@dataclass
class Route:
    body: bytes = b""
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    stream_bytes: int = 0  # > 0: send this many zero bytes instead of `body`, piece by piece
    delay: float = 0.0  # seconds to wait before answering
    piece_delay: float = 0.0  # seconds between streamed pieces (a trickling body)


class ImageServer(LocalHTTPServer):
    def __init__(self, host: str = "127.0.0.1", tls: ssl.SSLContext | None = None) -> None:
        self.routes: dict[str, Route] = {}
        self.requests: list[tuple[str, str]] = []  # (path, Host header)
        self.sent: dict[str, int] = {}
        self.finished: dict[str, bool] = {}
        super().__init__(_handler(self), host)
        if tls is not None:
            self._httpd.socket = tls.wrap_socket(self._httpd.socket, server_side=True)
        self.scheme = "https" if tls is not None else "http"
        self.host = host

    def url(self, path: str, host: str | None = None) -> str:
        return f"{self.scheme}://{host or self.host}:{self.port}{path}"


def _handler(server: ImageServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

        def do_GET(self) -> None:
            server.requests.append((self.path, self.headers.get("Host", "")))
            route = server.routes.get(self.path)
            if route is None:
                self.send_error(404)
                return
            time.sleep(route.delay)
            self.send_response(route.status)
            for name, value in route.headers.items():
                self.send_header(name, value)
            self.end_headers()
            server.sent[self.path] = 0
            server.finished[self.path] = False
            try:
                self._write(route)
                server.finished[self.path] = True
            except (BrokenPipeError, ConnectionResetError):
                pass

        def _write(self, route: Route) -> None:
            if not route.stream_bytes:
                self.wfile.write(route.body)
                server.sent[self.path] = len(route.body)
                return
            piece = bytes(PIECE)
            while server.sent[self.path] < route.stream_bytes:
                self.wfile.write(piece)
                self.wfile.flush()
                server.sent[self.path] += PIECE
                time.sleep(route.piece_delay)

    return Handler
