"""The prompt cache's disk tier (#33): entries evicted from memory, for every text model, kept
under `<home>/prompt-cache/` and read back when a later request's prompt shares their prefix —
after the memory bound evicted them, after an unload, after a restart.

An entry leaves memory when the bound (MLX_SERVER_PROMPT_CACHE_MB) needs its room, when a load
sheds caches, or when its model unloads (the server's stop unloads every model). If it holds at
least MLX_SERVER_PROMPT_CACHE_PERSIST_MIN_TOKENS tokens (shorter ones cost less to prefill than
to read), it is written to `<home>/prompt-cache/<model>/<hash>.safetensors` with its tokens and
the model's fingerprint in the metadata (prompt_cache_files.py). All models' files together stay
within MLX_SERVER_PROMPT_CACHE_DISK_MB: before a write, the least recently used files (by
modification time: a read touches its file, so the order survives a restart) are deleted until
it fits. An entry already covered on disk (the same tokens or more) is not written again; a new
entry removes the files it covers.

A request takes from disk an entry holding at least MIN_GAIN_TOKENS more of its prompt than the
best one in memory (prompt_cache.py), waiting for it if it is still being written. At a model's
load the headers of its directory are read once per process: a file of another fingerprint
(the model's files, its load or mlx-lm changed), format or model, or an unreadable one, is
skipped with a log line and left for the budget to remove; a file whose data fails to load when
a request wants it is deleted, with a log line.

Threads: `put` and `fetch` run on the MLX thread (they export and load arrays); one worker
thread writes and deletes files and makes no MLX call; the index is shared under a lock.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import json
import logging
import os
import shutil
import threading
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mlx_lm.models.cache import PromptTrie, can_trim_prompt_cache

from mlx_server.config import get_settings
from mlx_server.models import prompt_cache_files as files
from mlx_server.models.detection import ModelType
from mlx_server.models.loaders import ModelSpec
from mlx_server.models.prompt_cache import MiB, PromptCache

# A saved entry read back: its tokens and KV cache.
Entry = tuple[list[int], list[Any]]

logger = logging.getLogger("mlx_server.prompt_cache_store")

# A request reads an entry from disk when it holds at least this many more prompt tokens than
# the best entry in memory: reading a few tokens' worth costs more than prefilling them.
MIN_GAIN_TOKENS = 32


@dataclass
class _Stored:
    """A file on disk; its fingerprint and tokens once its header was read (its model loaded)."""

    size: int
    fingerprint: str | None = None
    tokens: list[int] | None = None


class PromptCacheDisk:
    """Every model's saved entries under `root`, at most `max_bytes` together."""

    def __init__(self, root: Path, max_bytes: int, min_tokens: int, pending_max_bytes: int) -> None:
        self.root = root
        self.max_bytes = max_bytes
        self.min_tokens = min_tokens
        # Exported entries hold their arrays until written: at most this many bytes wait.
        self.pending_max_bytes = pending_max_bytes
        self._lock = threading.Lock()
        self._files: OrderedDict[Path, _Stored] = OrderedDict()  # least recently used first
        self._bytes = 0  # the files' sizes, and the room reserved by the write under way
        self._pending = 0
        # The entries handed to the writer and not written yet (fingerprint, tokens), by ticket.
        self._queued: dict[int, tuple[str, list[int]]] = {}
        self._tickets = itertools.count()
        self._trie = PromptTrie()  # fingerprint, then tokens -> path
        self._indexed: set[Path] = set()  # model directories whose headers were read
        self._writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="prompt-cache-writer")
        self._writer.submit(self._scan).result()

    # --- The worker thread: scanning, writing, deleting ---

    def _scan(self) -> None:
        """What is on disk (left over by earlier runs), least recently used first; files over
        the budget (it was lowered) go."""
        found = []
        for directory in self.root.glob("*") if self.root.is_dir() else []:
            if directory.name.endswith(".saving"):  # an interrupted save of the format's first version
                shutil.rmtree(directory, ignore_errors=True)
                continue
            for path in directory.glob("*.tmp"):  # a write the process did not finish
                path.unlink(missing_ok=True)
            for path in directory.glob("*.safetensors"):
                stat = path.stat()
                found.append((stat.st_mtime_ns, path, stat.st_size))
        with self._lock:
            for _, path, size in sorted(found):
                self._files[path] = _Stored(size)
                self._bytes += size
            self._make_room(0)

    def _make_room(self, size: int) -> None:
        """Delete the least recently used files until `size` more bytes fit (under the lock)."""
        while self._files and self._bytes + size > self.max_bytes:
            self._delete(next(iter(self._files)))

    def _delete(self, path: Path) -> None:
        """Forget a file and delete it (under the lock)."""
        stored = self._files.pop(path)
        self._bytes -= stored.size
        if stored.fingerprint is not None and stored.tokens is not None:
            with contextlib.suppress(KeyError):  # a newer file took its place in the index
                self._trie.pop(stored.fingerprint, stored.tokens)
        path.unlink(missing_ok=True)

    def _write(self, ticket: int, path: Path, exported: files.Exported) -> None:
        with self._lock:
            fingerprint, tokens = self._queued[ticket]
        size = exported.size
        try:
            with self._lock:
                if path in self._files:  # the same entry, written twice before either was indexed
                    self._delete(path)
                self._make_room(size)
                self._bytes += size  # reserved: the budget holds while the file is written
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                files.write_entry(path, exported)
            except OSError as exc:  # a full or read-only disk costs the entry, nothing else
                logger.warning("could not write a prompt cache entry to %s: %s", path, exc)
                with self._lock:
                    self._bytes -= size
                return
            with self._lock:
                self._files[path] = _Stored(size, fingerprint, tokens)
                self._trie.add(fingerprint, tokens, path)
                for _, covered in self._trie.pop_prefixes(fingerprint, tokens):
                    if covered in self._files:  # this entry serves their prompts too
                        self._files[covered].tokens = None
                        self._delete(covered)
        finally:
            with self._lock:
                self._pending -= size
                del self._queued[ticket]

    # --- The MLX thread: indexing a model, putting and fetching entries ---

    def index(self, directory: Path, model_id: str, fingerprint: str) -> None:
        """Read the headers of a model's files once per process; the ones saved under
        `fingerprint` can serve from now on."""
        with self._lock:
            if directory in self._indexed:
                return
            self._indexed.add(directory)
            paths = [p for p in self._files if p.parent == directory]
        for path in paths:
            found = self._read_header(path, model_id, fingerprint)
            if found is None:
                continue
            with self._lock:
                stored = self._files.get(path)
                if stored is not None:
                    stored.fingerprint, stored.tokens = fingerprint, found
                    self._trie.add(fingerprint, found, path)

    @staticmethod
    def _read_header(path: Path, model_id: str, expected: str) -> list[int] | None:
        """The tokens of a file saved for `model_id` under `expected`, or None with a log line."""
        try:
            metadata = files.read_metadata(path)
            if metadata.get("format") != files.FORMAT or metadata.get("model") != model_id:
                logger.warning("ignoring %s: not a prompt cache of %s", path, model_id)
                return None
            if metadata.get("fingerprint") != expected:
                logger.warning("ignoring %s: saved for another version or load of %s", path, model_id)
                return None
            tokens = json.loads(metadata["tokens"])
            if not isinstance(tokens, list) or not tokens or not all(type(t) is int for t in tokens):
                raise ValueError("its tokens are not a list of integers")
            return tokens
        except Exception as exc:  # a corrupt or foreign file must never stop the load
            logger.warning("ignoring %s: unreadable prompt cache (%s)", path, exc)
            return None

    def put(self, model_id: str, fingerprint: str, tokens: list[int], cache: list[Any]) -> None:
        """An entry leaving memory: exported here, written by the worker (unless short, already
        covered on disk, larger than the budget, or too much waits to be written)."""
        if len(tokens) < self.min_tokens or not can_trim_prompt_cache(cache):
            return
        with self._lock:
            found = self._trie.search(fingerprint, tokens)
            covering = found.exact or (found.longer if found.common_prefix == len(tokens) else None)
            if covering is not None:
                self._touch(self._trie.get(fingerprint, covering))
                return
        metadata = {"format": files.FORMAT, "model": model_id, "fingerprint": fingerprint}
        metadata["tokens"] = json.dumps(tokens)
        try:
            exported = files.export_entry(cache, metadata)
        except ValueError as exc:
            logger.info("prompt cache entry of %s not saved: %s", model_id, exc)
            return
        with self._lock:
            # One entry may always wait, however large; more only within pending_max_bytes.
            backlog = self._pending and self._pending + exported.size > self.pending_max_bytes
            if exported.size > self.max_bytes or backlog:
                logger.info(
                    "prompt cache entry of %s (%d tokens, %d bytes) not saved: over the disk budget "
                    "or %d bytes still waiting to be written",
                    model_id,
                    len(tokens),
                    exported.size,
                    self._pending,
                )
                return
            self._pending += exported.size
            ticket = next(self._tickets)
            self._queued[ticket] = (fingerprint, tokens)
        name = hashlib.sha256(json.dumps(tokens).encode()).hexdigest()[:32]
        path = self.root / files.store_dir(model_id).name / f"{name}.safetensors"
        try:
            self._writer.submit(self._write, ticket, path, exported)
        except RuntimeError:  # closed: the settings changed under a loaded model
            with self._lock:
                self._pending -= exported.size
                del self._queued[ticket]

    def fetch(self, fingerprint: str, prompt: list[int], better_than: int) -> Entry | None:
        """The saved entry sharing the longest prefix with `prompt`, read back, when it holds at
        least MIN_GAIN_TOKENS more of it than `better_than`; None otherwise. An entry that would
        serve and is still being written (evicted a moment ago) is waited for."""
        need = max(self.min_tokens, better_than + MIN_GAIN_TOKENS)
        with self._lock:
            queued = [tokens for fp, tokens in self._queued.values() if fp == fingerprint]
        if any(_shared(tokens, prompt) >= need for tokens in queued):
            self.flush()
        with self._lock:
            best = self._best(fingerprint, prompt)
        if best is None or best[2] < need:
            return None
        path, tokens, _ = best
        try:
            cache, metadata = files.load_entry(path)
            if metadata.get("fingerprint") != fingerprint or cache[0].offset != len(tokens):
                raise ValueError("its contents are not the ones indexed")
        except Exception as exc:  # damaged since its header was read: never the request's error
            if not path.exists():  # the budget removed it a moment ago
                return None
            logger.warning("ignoring %s: unreadable prompt cache (%s); deleted", path, exc)
            with self._lock:
                if path in self._files:
                    self._delete(path)
            return None
        with self._lock:
            self._touch(path)
        logger.info("prompt cache entry of %d tokens read from %s", len(tokens), path)
        return tokens, cache

    def _best(self, fingerprint: str, prompt: list[int]) -> tuple[Path, list[int], int] | None:
        """(path, tokens, prompt tokens it holds) of the entry sharing most of `prompt`."""
        found = self._trie.search(fingerprint, prompt)
        options = []
        if found.exact is not None:
            options.append((found.exact, len(prompt)))
        if found.shorter is not None:
            options.append((found.shorter, len(found.shorter)))
        if found.longer is not None:
            options.append((found.longer, min(found.common_prefix, len(prompt))))
        if not options:
            return None
        tokens, held = max(options, key=lambda option: option[1])
        return self._trie.get(fingerprint, tokens), tokens, held

    def _touch(self, path: Path) -> None:
        """Mark a file most recently used, here and on disk (under the lock)."""
        if path in self._files:
            self._files.move_to_end(path)
            with contextlib.suppress(OSError):
                os.utime(path)

    # --- Any thread ---

    def flush(self) -> None:
        """Wait until every entry handed over so far is written."""
        with contextlib.suppress(RuntimeError):  # closed: its writes are done
            self._writer.submit(lambda: None).result()

    def close(self) -> None:
        self._writer.shutdown(wait=True)

    def figures(self) -> dict[str, int]:
        with self._lock:
            return {
                "bytes": self._bytes,
                "files": len(self._files),
                "max_bytes": self.max_bytes,
                "pending_bytes": self._pending,
            }


def _shared(a: list[int], b: list[int]) -> int:
    """How many first tokens `a` and `b` have in common."""
    return next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))


@dataclass(frozen=True)
class ModelSpill:
    """One loaded model's view of the disk tier (prompt_cache.Spill)."""

    disk: PromptCacheDisk
    model_id: str
    fingerprint: str

    def put(self, tokens: list[int], cache: list[Any]) -> None:
        self.disk.put(self.model_id, self.fingerprint, tokens, cache)

    def fetch(self, prompt: list[int], better_than: int) -> Entry | None:
        return self.disk.fetch(self.fingerprint, prompt, better_than)


_disk: PromptCacheDisk | None = None
_disk_lock = threading.Lock()


def get_prompt_cache_disk() -> PromptCacheDisk | None:
    """The disk tier of the settings' home, or None when MLX_SERVER_PROMPT_CACHE_DISK_MB or
    MLX_SERVER_PROMPT_CACHE_PERSIST_MIN_TOKENS is 0 (then files on disk are left alone)."""
    global _disk
    settings = get_settings()
    max_bytes = settings.prompt_cache_disk_mb * MiB
    min_tokens = settings.prompt_cache_persist_min_tokens
    if max_bytes <= 0 or min_tokens <= 0:
        return None
    root = settings.home_dir / "prompt-cache"
    with _disk_lock:
        if _disk is None or (_disk.root, _disk.max_bytes, _disk.min_tokens) != (root, max_bytes, min_tokens):
            if _disk is not None:
                _disk.close()
            _disk = PromptCacheDisk(root, max_bytes, min_tokens, settings.prompt_cache_mb * MiB)
        return _disk


def flush_prompt_cache_writes() -> None:
    """Wait for the entries handed to the disk tier to be written (at the server's stop)."""
    with _disk_lock:
        disk = _disk
    if disk is not None:
        disk.flush()


def prompt_cache_disk_figures() -> dict[str, int]:
    """Bytes and files on disk, the budget and the bytes waiting to be written."""
    with _disk_lock:
        disk = _disk
    if disk is not None:
        return disk.figures()
    max_bytes = get_settings().prompt_cache_disk_mb * MiB
    return {"bytes": 0, "files": 0, "max_bytes": max_bytes, "pending_bytes": 0}


def attach_disk(spec: ModelSpec, cache: PromptCache) -> None:
    """Give a freshly loaded text model's cache its fingerprint and the disk tier, whose files
    saved under that fingerprint then serve it (on the MLX thread, at load)."""
    if spec.model_type is not ModelType.TEXT_GEN:  # only text models keep a prompt cache
        return
    try:
        cache.fingerprint = files.fingerprint(spec)
    except OSError as exc:  # the files went away under a loaded model: nothing to save or read
        logger.warning("no prompt cache on disk for %s: %s", spec.model_id, exc)
        return
    disk = get_prompt_cache_disk()
    if disk is None:
        return
    disk.index(disk.root / files.store_dir(spec.model_id).name, spec.model_id, cache.fingerprint)
    cache.spill = ModelSpill(disk, spec.model_id, cache.fingerprint)


def reset_prompt_cache_disk() -> None:
    """Forget the disk tier after its writes (at the server's stop, and between tests)."""
    global _disk
    with _disk_lock:
        disk, _disk = _disk, None
    if disk is not None:
        disk.close()
