"""Fetch a hub snapshot into the huggingface_hub cache: resumable, verified, cancellable.

huggingface_hub 2.4.0 writes each file to a process-unique temporary name and deletes it on any
failure (`file_download._download_to_tmp_and_move`), so nothing survives a cancel or a crash, and
it does not check the bytes it received against the hub's hashes. So the blobs are transferred
here, through huggingface_hub's HTTP session and metadata calls: into `blobs/<etag>.incomplete`
(a stable name, continued with a Range request after a cancel or a restart), checked against the
hub's SHA-256 (LFS files) or git blob id, then renamed to `blobs/<etag>`. `snapshot_download`
links the snapshot afterwards exactly as it does for its own downloads (refs, snapshots/<commit>,
the tree cache); every blob is already there, so it transfers nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Protocol
from urllib.parse import urlsplit

import httpx2
from huggingface_hub import constants as hf_constants
from huggingface_hub import get_hf_file_metadata, hf_hub_url, snapshot_download
from huggingface_hub.file_download import repo_folder_name
from huggingface_hub.hf_api import HfApi, RepoFile
from huggingface_hub.utils import (
    WeakFileLock,
    build_hf_headers,
    filter_repo_objects,
    hf_raise_for_status,
    http_stream_backoff,
)
from huggingface_hub.utils.sha import git_hash, sha_fileobj
from mlx_lm.utils import DEFAULT_ALLOW_PATTERNS

from mlx_manager.services.hub import HubConfig, HubError
from mlx_server.facade import __version__

# The files mlx-lm itself fetches (weights, configs, tokenizer); its completeness check uses the same.
ALLOW_PATTERNS: list[str] = list(DEFAULT_ALLOW_PATTERNS)
CHUNK_BYTES = 256 * 1024  # the cancel and progress granularity
TRANSFER_ATTEMPTS = 5


class DownloadStopped(Exception):
    """The job was cancelled or the app is shutting down; partial files stay for a resume."""


class CorruptFileError(Exception):
    """A file's bytes do not match the hub's hash; the damaged file has been deleted."""


class FetchProgress(Protocol):
    def started(self, total_bytes: int) -> None: ...

    def found(self, n: int) -> None:
        """`n` bytes were already on disk (negative: a partial file had to be dropped)."""

    def advance(self, n: int) -> None:
        """`n` bytes were received."""

    def check_stop(self) -> None:
        """Raise DownloadStopped if the job should stop."""

    def wait(self, seconds: float) -> None:
        """Sleep, raising DownloadStopped as soon as the job should stop."""


@dataclass(frozen=True)
class RemoteFile:
    path: str
    size: int
    sha256: str | None  # LFS files
    blob_id: str  # the git object id (of the LFS pointer, for LFS files)


@dataclass(frozen=True)
class Snapshot:
    repo_id: str
    commit: str
    path: Path
    size_bytes: int


def list_files(api: HfApi, repo_id: str, commit: str) -> list[RemoteFile]:
    """The files of `repo_id` at `commit` that an MLX model needs."""
    entries = {e.path: e for e in api.list_repo_tree(repo_id, revision=commit, recursive=True)}
    wanted = filter_repo_objects(list(entries), allow_patterns=ALLOW_PATTERNS)
    files = []
    for path in wanted:
        entry = entries[path]
        if isinstance(entry, RepoFile):
            lfs = entry.lfs
            size = lfs.size if lfs is not None else entry.size
            files.append(RemoteFile(path, size, lfs.sha256 if lfs is not None else None, entry.blob_id))
    names = [Path(f.path).name for f in files]
    if "config.json" not in names or not any(n.endswith(".safetensors") for n in names):
        raise HubError(
            422,
            f"{repo_id} has no config.json with safetensors weights, so MLX cannot load it; "
            "pick an MLX model (mlx-community converts most models).",
        )
    return files


def fetch_snapshot(config: HubConfig, repo_id: str, revision: str, progress: FetchProgress) -> Snapshot:
    """Download what `repo_id` at `revision` needs into the cache; returns the snapshot folder."""
    api = config.api()
    resolved = api.resolve_revision(repo_id, revision=revision, cache_dir=config.cache_dir)
    files = list_files(api, repo_id, resolved.resolved)
    storage = config.cache_dir / repo_folder_name(repo_id=repo_id, repo_type="model")
    progress.started(sum(f.size for f in files))
    for remote in files:
        progress.check_stop()
        if (storage / "snapshots" / resolved.resolved / remote.path).exists():
            progress.found(remote.size)
        else:
            _fetch_blob(config, repo_id, resolved.resolved, remote, storage, progress)
    progress.check_stop()
    path = snapshot_download(
        repo_id,
        revision=resolved,
        cache_dir=config.cache_dir,
        endpoint=config.endpoint,
        token=config.token,
        allow_patterns=ALLOW_PATTERNS,
    )
    return Snapshot(repo_id, resolved.resolved, Path(path), sum(f.size for f in files))


def _fetch_blob(
    config: HubConfig, repo_id: str, commit: str, remote: RemoteFile, storage: Path, progress: FetchProgress
) -> None:
    url = hf_hub_url(repo_id, remote.path, revision=commit, endpoint=config.endpoint)
    metadata = get_hf_file_metadata(url, token=config.token, endpoint=config.endpoint)
    if not metadata.etag:
        raise HubError(
            502, f"The hub sent no ETag for {remote.path}; it does not look like a Hugging Face hub."
        )
    blob = storage / "blobs" / metadata.etag
    lock = config.cache_dir / ".locks" / storage.name / f"{metadata.etag}.lock"
    lock.parent.mkdir(parents=True, exist_ok=True)
    blob.parent.mkdir(parents=True, exist_ok=True)
    # The lock huggingface_hub takes for this blob: another process fetching it waits for us.
    with WeakFileLock(lock):
        if blob.exists():
            progress.found(remote.size)
            return
        partial = blob.with_name(f"{metadata.etag}.incomplete")
        # Like huggingface_hub: the token goes to the hub, never to a CDN it redirects to.
        same_host = urlsplit(metadata.location).netloc == urlsplit(config.endpoint).netloc
        headers = build_hf_headers(
            token=config.token if same_host else False,
            library_name="mlx-manager",
            library_version=__version__,
        )
        _transfer(metadata.location, partial, remote.size, headers, progress)
        _verify(partial, remote)
        partial.replace(blob)


def _transfer(url: str, partial: Path, size: int, headers: dict[str, str], progress: FetchProgress) -> None:
    """Bring `partial` to `size` bytes, continuing what is on disk; network errors are retried."""
    error: Exception | None = None
    for attempt in range(TRANSFER_ATTEMPTS):
        offset = partial.stat().st_size if partial.exists() else 0
        if offset > size:  # not a prefix of this file
            partial.unlink()
            offset = 0
        if attempt == 0:
            progress.found(offset)
        if offset == size:
            return
        try:
            _get_from(url, partial, offset, headers, progress)
        except httpx2.TransportError as exc:
            error = exc
            progress.wait(min(2**attempt, 8))
    if partial.exists() and partial.stat().st_size == size:
        return
    raise error or OSError(f"the hub sent {partial.name} short of its {size} bytes")


def _get_from(url: str, partial: Path, offset: int, headers: dict[str, str], progress: FetchProgress) -> None:
    request_headers = {**headers, "Accept-Encoding": "identity"}
    if offset:
        request_headers["Range"] = f"bytes={offset}-"
    with http_stream_backoff(
        "GET", url, headers=request_headers, timeout=hf_constants.HF_HUB_DOWNLOAD_TIMEOUT
    ) as response:
        if response.status_code == 416:  # the partial file is no prefix of the file: start over
            partial.unlink()
            progress.found(-offset)
            return
        hf_raise_for_status(response)
        if offset and response.status_code != 206:  # the server ignored the Range: it sends everything
            progress.found(-offset)
            offset = 0
        elif offset and not response.headers.get("Content-Range", "").startswith(f"bytes {offset}-"):
            raise OSError(f"the hub answered a range other than bytes={offset}- for {url}")
        with partial.open("ab" if offset else "wb") as out:
            for chunk in response.iter_bytes(CHUNK_BYTES):
                out.write(chunk)
                progress.advance(len(chunk))
                progress.check_stop()


def _verify(partial: Path, remote: RemoteFile) -> None:
    """Compare with the hub's hash; a mismatch deletes the file so a retry fetches it again."""
    if remote.sha256 is not None:
        with partial.open("rb") as data:
            actual, expected, kind = sha_fileobj(data).hex(), remote.sha256, "SHA-256"
    else:
        actual, expected, kind = git_hash(partial.read_bytes()), remote.blob_id, "git blob id"
    if actual != expected:
        partial.unlink(missing_ok=True)
        raise CorruptFileError(
            f"{remote.path} arrived corrupt: its {kind} is {actual[:12]}…, the hub says {expected[:12]}…. "
            "The damaged file was deleted; resume the download to fetch it again."
        )
