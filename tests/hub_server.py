"""A local Hugging Face hub for tests: the routes huggingface_hub 2.4.0 calls, on 127.0.0.1.

What the client sends (huggingface_hub/hf_api.py, file_download.py, _snapshot_download.py):
- GET  /api/models?search=&author=&filter=&sort=&limit=&expand=...     list_models
- GET  /api/models/{repo}[/revision/{rev}][?blobs=True]                 model_info, resolve_revision
- GET  /api/models/{repo}/tree/{rev}?recursive=True                     list_repo_tree
- HEAD /{repo}/resolve/{rev}/{path}  ETag (sha256 of LFS files, else the git blob id),
       X-Repo-Commit, X-Linked-Etag / X-Linked-Size (LFS), Content-Length     get_hf_file_metadata
- GET  /{repo}/resolve/{rev}/{path}  the bytes; `Range: bytes=N-` gets 206 + Content-Range
Errors carry the X-Error-Code header huggingface_hub maps to its exceptions.

Test knobs: `throttle_bps` (read per 64 KiB piece, so it can change mid-transfer), `corrupt`
(files served with one byte flipped under their true hash), gated repos that need `token`.
Every request is recorded (method, path, Range), and the bytes sent per file are counted.
"""

from __future__ import annotations

import hashlib
import json
import struct
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from huggingface_hub.utils.sha import git_hash

from tests.support import LocalHTTPServer

PIECE = 64 * 1024
LFS_SUFFIXES = (".safetensors", ".bin", ".gguf")


@dataclass(frozen=True)
class HubFile:
    path: str
    size: int
    sha256: str
    git_oid: str  # of the LFS pointer for LFS files, as git stores them
    lfs: bool
    source: Path | None = None  # big files are read from disk
    content: bytes | None = None

    @classmethod
    def of(cls, path: str, data: bytes | Path) -> HubFile:
        raw = data.read_bytes() if isinstance(data, Path) else data
        sha256 = hashlib.sha256(raw).hexdigest()
        lfs = path.endswith(LFS_SUFFIXES)
        pointer = f"version https://git-lfs.github.com/spec/v1\noid sha256:{sha256}\nsize {len(raw)}\n"
        return cls(
            path=path,
            size=len(raw),
            sha256=sha256,
            git_oid=git_hash(pointer.encode() if lfs else raw),
            lfs=lfs,
            source=data if isinstance(data, Path) else None,
            content=None if isinstance(data, Path) else raw,
        )

    def read(self, start: int, end: int) -> bytes:
        if self.content is not None:
            return self.content[start:end]
        assert self.source is not None
        with self.source.open("rb") as f:
            f.seek(start)
            return f.read(end - start)


def safetensors_parameters(path: Path) -> dict[str, int]:
    """Parameter count per dtype, as the hub reports it, from a safetensors header."""
    with path.open("rb") as f:
        (length,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(length))
    counts: dict[str, int] = {}
    for name, tensor in header.items():
        if name != "__metadata__":
            n = 1
            for dim in tensor["shape"]:
                n *= dim
            counts[tensor["dtype"]] = counts.get(tensor["dtype"], 0) + n
    return counts


@dataclass
class HubRepo:
    repo_id: str
    files: list[HubFile] = field(default_factory=list)
    downloads: int = 0
    likes: int = 0
    last_modified: str = "2026-01-01T00:00:00.000Z"
    tags: list[str] = field(default_factory=lambda: ["mlx", "safetensors", "text-generation"])
    gated: bool = False
    parameters: dict[str, int] | None = None  # safetensors dtype counts for the listing
    config: dict[str, Any] | None = None
    pipeline_tag: str = "text-generation"

    @property
    def commit(self) -> str:
        listing = self.repo_id + "".join(f"{f.path}:{f.git_oid}" for f in self.files)
        return hashlib.sha1(listing.encode()).hexdigest()

    def file(self, path: str) -> HubFile | None:
        return next((f for f in self.files if f.path == path), None)

    def summary(self, expand: list[str], blobs: bool = False) -> dict[str, Any]:
        item: dict[str, Any] = {
            "downloads": self.downloads,
            "likes": self.likes,
            "lastModified": self.last_modified,
            "createdAt": "2025-06-01T00:00:00.000Z",
            "tags": self.tags,
            "gated": "auto" if self.gated else False,
            "private": False,
            "library_name": "mlx",
            "pipeline_tag": self.pipeline_tag,
            "sha": self.commit,
            "usedStorage": sum(f.size for f in self.files),
        }
        if self.parameters:
            item["safetensors"] = {"parameters": self.parameters, "total": sum(self.parameters.values())}
        if self.config is not None:
            item["config"] = self.config
        siblings = []
        for f in self.files:
            sibling: dict[str, Any] = {"rfilename": f.path}
            if blobs:
                sibling |= {"size": f.size, "blobId": f.git_oid}
                if f.lfs:
                    sibling["lfs"] = {"size": f.size, "sha256": f.sha256, "pointerSize": 134}
            siblings.append(sibling)
        item["siblings"] = siblings
        if expand:  # the hub returns only what was asked for
            item = {k: v for k, v in item.items() if k in expand}
        return {"_id": hashlib.md5(self.repo_id.encode()).hexdigest()[:24], "id": self.repo_id, **item}


def smollm_repo(model_dir: Path, repo_id: str, **fields: Any) -> HubRepo:
    """A repository holding a converted MLX model directory (config, weights, tokenizer)."""
    files = [HubFile.of(p.name, p) for p in sorted(model_dir.iterdir()) if p.is_file()]
    weights = model_dir / "model.safetensors"
    config = json.loads((model_dir / "config.json").read_text())
    return HubRepo(repo_id, files, parameters=safetensors_parameters(weights), config=config, **fields)


@dataclass(frozen=True)
class RecordedRequest:
    method: str
    path: str
    range: str | None
    authorized: bool


class HubServer(LocalHTTPServer):
    def __init__(self, repos: list[HubRepo], *, token: str = "hf_test_token_0123456789") -> None:
        self.repos = {repo.repo_id: repo for repo in repos}
        self.token = token
        self.throttle_bps: float | None = None
        self.corrupt: set[str] = set()  # "repo_id/path"
        self.requests: list[RecordedRequest] = []
        self.sent: dict[str, int] = {}  # "repo_id/path" -> bytes sent
        self.lock = threading.Lock()
        super().__init__(_handler(self))
        self.url = f"http://127.0.0.1:{self.port}"

    def record(self, request: RecordedRequest) -> None:
        with self.lock:
            self.requests.append(request)

    def ranges(self, path_suffix: str) -> list[str | None]:
        """The Range headers of the GETs whose path ends with `path_suffix`."""
        with self.lock:
            return [r.range for r in self.requests if r.method == "GET" and r.path.endswith(path_suffix)]

    def count_sent(self, key: str, n: int) -> None:
        with self.lock:
            self.sent[key] = self.sent.get(key, 0) + n


def _handler(hub: HubServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:  # quiet test output
            pass

        def do_HEAD(self) -> None:
            self._route(body=False)

        def do_GET(self) -> None:
            self._route(body=True)

        def _route(self, body: bool) -> None:
            url = urlsplit(self.path)
            query = parse_qs(url.query)
            parts = [unquote(p) for p in url.path.strip("/").split("/")]
            auth = self.headers.get("Authorization") == f"Bearer {hub.token}"
            hub.record(RecordedRequest(self.command, url.path, self.headers.get("Range"), auth))
            try:
                if parts[:2] == ["api", "models"] and len(parts) == 2:
                    self._search(query)
                elif parts[:2] == ["api", "models"] and len(parts) >= 4:
                    self._api(parts[2:], query, auth)
                elif len(parts) >= 5 and parts[2] == "resolve":
                    self._resolve(parts, auth, body)
                else:
                    self._error(404, "RepoNotFound", "Repository not found")
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client went away (cancelled, or its process was killed)

        def _search(self, query: dict[str, list[str]]) -> None:
            repos = list(hub.repos.values())
            if search := query.get("search", [""])[0].lower():
                repos = [r for r in repos if search in r.repo_id.lower()]
            if author := query.get("author", [""])[0]:
                repos = [r for r in repos if r.repo_id.startswith(f"{author}/")]
            repos = [r for r in repos if all(tag in r.tags for tag in query.get("filter", []))]
            if pipeline_tag := query.get("pipeline_tag", [""])[0]:
                repos = [r for r in repos if r.pipeline_tag == pipeline_tag]
            sort = query.get("sort", [""])[0]
            if sort:
                repos.sort(key=lambda r: r.summary([]).get(sort) or 0, reverse=True)
            limit = int(query.get("limit", ["1000"])[0])
            self._json([r.summary(query.get("expand", [])) for r in repos[:limit]])

        def _repo(self, repo_id: str, auth: bool) -> HubRepo | None:
            repo = hub.repos.get(repo_id)
            if repo is None:
                self._error(404, "RepoNotFound", "Repository not found")
            elif repo.gated and not auth:
                self._error(401, "GatedRepo", "Access to this model is restricted")
                return None
            return repo

        def _revision_ok(self, repo: HubRepo, revision: str) -> bool:
            if revision in ("main", repo.commit):
                return True
            self._error(404, "RevisionNotFound", "Invalid rev id")
            return False

        def _api(self, rest: list[str], query: dict[str, list[str]], auth: bool) -> None:
            repo = self._repo("/".join(rest[:2]), auth)
            if repo is None:
                return
            if len(rest) == 2 or (len(rest) == 4 and rest[2] == "revision"):
                if len(rest) == 2 or self._revision_ok(repo, rest[3]):
                    blobs = query.get("blobs", ["false"])[0].lower() == "true"
                    self._json(repo.summary(query.get("expand", []), blobs=blobs))
            elif len(rest) >= 4 and rest[2] == "tree" and self._revision_ok(repo, rest[3]):
                prefix = "/".join(rest[4:])
                entries = []
                for f in repo.files:
                    if f.path.startswith(prefix):
                        entry: dict[str, Any] = {
                            "type": "file",
                            "oid": f.git_oid,
                            "size": f.size,
                            "path": f.path,
                        }
                        if f.lfs:
                            entry["lfs"] = {"oid": f.sha256, "size": f.size, "pointerSize": 134}
                        entries.append(entry)
                self._json(entries)
            else:
                self._error(404, "EntryNotFound", "Not found")

        def _resolve(self, parts: list[str], auth: bool, body: bool) -> None:
            repo = self._repo("/".join(parts[:2]), auth)
            if repo is None or not self._revision_ok(repo, parts[3]):
                return
            entry = repo.file("/".join(parts[4:]))
            if entry is None:
                self._error(404, "EntryNotFound", "Entry not found", {"X-Repo-Commit": repo.commit})
                return
            start, end = 0, entry.size
            status = 200
            headers = {
                "X-Repo-Commit": repo.commit,
                "ETag": f'"{entry.sha256 if entry.lfs else entry.git_oid}"',
            }
            headers["Accept-Ranges"] = "bytes"
            if entry.lfs:
                headers |= {"X-Linked-Etag": headers["ETag"], "X-Linked-Size": str(entry.size)}
            requested = self.headers.get("Range")
            if body and requested and requested.startswith("bytes="):
                first, _, last = requested[len("bytes=") :].partition("-")
                start, end = int(first), (int(last) + 1 if last else entry.size)
                if start >= entry.size:
                    self._send(416, b"", {"Content-Range": f"bytes */{entry.size}"})
                    return
                status = 206
                headers["Content-Range"] = f"bytes {start}-{end - 1}/{entry.size}"
            headers["Content-Length"] = str(end - start)
            self._head(status, headers)
            if body:
                self._stream(repo, entry, start, end)

        def _stream(self, repo: HubRepo, entry: HubFile, start: int, end: int) -> None:
            key = f"{repo.repo_id}/{entry.path}"
            position = start
            while position < end:
                piece = entry.read(position, min(end, position + PIECE))
                middle = entry.size // 2
                if key in hub.corrupt and position <= middle < position + len(piece):
                    i = middle - position
                    piece = piece[:i] + bytes([piece[i] ^ 0xFF]) + piece[i + 1 :]
                self.wfile.write(piece)
                position += len(piece)
                hub.count_sent(key, len(piece))
                if rate := hub.throttle_bps:
                    time.sleep(len(piece) / rate)

        def _json(self, value: Any) -> None:
            self._send(200, json.dumps(value).encode(), {"Content-Type": "application/json"})

        def _error(self, status: int, code: str, message: str, extra: dict[str, str] | None = None) -> None:
            headers = {"X-Error-Code": code, "X-Error-Message": message, "Content-Type": "application/json"}
            self._send(status, json.dumps({"error": message}).encode(), headers | (extra or {}))

        def _send(self, status: int, payload: bytes, headers: dict[str, str]) -> None:
            self._head(status, {**headers, "Content-Length": str(len(payload))})
            if self.command != "HEAD":
                self.wfile.write(payload)

        def _head(self, status: int, headers: dict[str, str]) -> None:
            self.send_response(status)
            for name, value in headers.items():
                self.send_header(name, value)
            self.end_headers()

    return Handler
