"""Prompt caches of pinned models kept across restarts (#14, "optionally persist the caches of
pinned models' long system prompts").

A pinned model is the one a user keeps for an agent; its long shared prefixes (system prompts,
tool definitions) cost the most prefill and come back after every restart. When such a model
unloads (or the server stops, which unloads everything), the entries of its prompt cache
holding at least MLX_SERVER_PROMPT_CACHE_PERSIST_MIN_TOKENS tokens are written under
`<home>/prompt-cache/<model>/`, one safetensors file each (mlx-lm's `save_prompt_cache`), with
their tokens and the model's fingerprint in the metadata. When the model loads again they are
read back, most recently used first, as far as the cache's bound leaves room; a file of another
fingerprint (the model's files, load or mlx-lm changed), another format or a corrupt one is
skipped with a log line, never an error. An unpinned model's unload leaves what was saved in
place: pins do not outlive a restart, and the saved prefixes stay valid under their fingerprint
until a pinned unload of the model replaces them.

Runs on the MLX thread (the pool's load and unload).
"""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
from importlib.metadata import version
from pathlib import Path
from typing import Any

from mlx_lm.models.cache import load_prompt_cache, save_prompt_cache

from mlx_server.config import get_settings
from mlx_server.models.detection import ModelType
from mlx_server.models.loaders import ModelSpec
from mlx_server.models.prompt_cache import PromptCache

logger = logging.getLogger("mlx_server.prompt_cache_store")

FORMAT = "mlx-manager-prompt-cache/1"


def store_dir(model_id: str) -> Path:
    """Where a model's saved entries live (the id hashed: ids may hold slashes)."""
    name = hashlib.sha256(model_id.encode()).hexdigest()[:24]
    return get_settings().home_dir / "prompt-cache" / name


def _files(path: Path | None) -> list[tuple[str, int, int]]:
    """Name, size and modification time of the file at `path` or of the files in it."""
    if path is None:
        return []
    files = [path] if path.is_file() else [p for p in path.iterdir() if p.is_file()]
    return sorted((p.name, p.stat().st_size, p.stat().st_mtime_ns) for p in files)


def fingerprint(spec: ModelSpec) -> str:
    """What a KV cache depends on: the files (names, sizes, modification times) of the model and
    of its LoRA adapter, its draft model (a model with a draft keeps the draft's layers in the
    same entries, speculative.py), how it is loaded (its estimate differs between float32 and as
    stored; KV quantization) and mlx-lm."""
    described = {
        "model": spec.model_id,
        "files": _files(spec.path),
        "lora": _files(spec.lora),
        "draft": [spec.draft.model_id, _files(spec.draft.path)] if spec.draft else None,
        "estimate_bytes": spec.estimate_bytes,
        "kv_bits": spec.kv_bits,
        "kv_group_size": spec.kv_group_size,
        "mlx_lm": version("mlx-lm"),
    }
    return hashlib.sha256(json.dumps(described, sort_keys=True).encode()).hexdigest()


def save_entries(model_id: str, cache: PromptCache) -> int:
    """Write the long entries of a pinned model's cache, replacing what was saved before;
    returns how many. Nothing without a fingerprint (a cache not made by a load) or when the
    setting is 0."""
    min_tokens = get_settings().prompt_cache_persist_min_tokens
    if cache.fingerprint is None or min_tokens <= 0:
        return 0
    target = store_dir(model_id)
    staging = target.with_name(target.name + ".saving")
    entries = cache.longest_entries(min_tokens)
    try:
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir(parents=True)
        for i, (tokens, kv) in enumerate(entries):  # most recently used first
            metadata = {"format": FORMAT, "model": model_id, "fingerprint": cache.fingerprint}
            save_prompt_cache(
                str(staging / f"{i:05d}.safetensors"), kv, {**metadata, "tokens": json.dumps(tokens)}
            )
        shutil.rmtree(target, ignore_errors=True)
        staging.rename(target)
    except OSError as exc:  # a full or read-only disk costs the saved prefixes, not the unload
        logger.warning("could not save the prompt cache of %s in %s: %s", model_id, target, exc)
        return 0
    logger.info("saved %d prompt cache entries of %s in %s", len(entries), model_id, target)
    return len(entries)


def _read(path: Path, spec: ModelSpec, expected: str) -> tuple[list[Any], list[int]] | None:
    """One saved entry (its KV cache and tokens), or None with a log line saying why not."""
    try:
        kv, metadata = load_prompt_cache(str(path), return_metadata=True)
        if metadata.get("format") != FORMAT or metadata.get("model") != spec.model_id:
            logger.warning("ignoring %s: not a prompt cache of %s", path, spec.model_id)
            return None
        if metadata.get("fingerprint") != expected:
            logger.warning("ignoring %s: saved for another version or load of %s", path, spec.model_id)
            return None
        tokens = json.loads(metadata["tokens"])
        if not isinstance(tokens, list) or not all(isinstance(t, int) for t in tokens):
            raise ValueError("its tokens are not a list of integers")
        return kv, tokens
    except Exception as exc:  # a corrupt or foreign file must never stop the load
        logger.warning("ignoring %s: unreadable prompt cache (%s)", path, exc)
        return None


def restore_entries(spec: ModelSpec, cache: PromptCache) -> int:
    """Give a freshly loaded model's cache its fingerprint and the entries saved under it, most
    recently used first while they fit in the cache's room; returns how many came back."""
    if spec.model_type is not ModelType.TEXT_GEN:  # only text models keep a prompt cache
        return 0
    try:
        cache.fingerprint = fingerprint(spec)
    except OSError as exc:  # the files went away under a loaded model: nothing to save or read
        logger.warning("no prompt cache persistence for %s: %s", spec.model_id, exc)
        return 0
    directory = store_dir(spec.model_id)
    if get_settings().prompt_cache_persist_min_tokens <= 0 or not directory.is_dir():
        return 0
    room = cache.room()
    kept = []
    for path in sorted(directory.glob("*.safetensors")):  # most recently used first
        entry = _read(path, spec, cache.fingerprint)
        size = sum(c.nbytes for c in entry[0]) if entry is not None else 0
        if entry is not None and size <= room:
            kept.append(entry)
            room -= size
    # Oldest first, so the most recently used one is also the last to be evicted again.
    restored = sum(cache.restore(kv, tokens) for kv, tokens in reversed(kept))
    if restored:
        logger.info(
            "restored %d prompt cache entries of %s (%d bytes)", restored, spec.model_id, cache.nbytes
        )
    return restored
