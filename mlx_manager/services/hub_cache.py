"""What the Hugging Face cache already holds: a repo at a revision whose files are complete,
found without the network (refs/<revision> -> snapshots/<commit>), so a download of it only
registers the files (services/downloads.py)."""

from __future__ import annotations

import json
from pathlib import Path

from huggingface_hub.file_download import REGEX_COMMIT_HASH, repo_folder_name

from mlx_manager.services.hub import HubConfig
from mlx_manager.services.hub_fetch import Snapshot
from mlx_server.facade import inspect_path

INDEX = "model.safetensors.index.json"
CACHED_NOTE = "Already complete in the Hugging Face cache ({path}): registered without downloading."


def cached_snapshot(config: HubConfig, repo_id: str, revision: str) -> Snapshot | None:
    """The cached snapshot of `repo_id` at `revision` when every weight file it needs is there
    and the server can load it; None otherwise (then the hub is asked)."""
    storage = config.cache_dir / repo_folder_name(repo_id=repo_id, repo_type="model")
    commit = revision if REGEX_COMMIT_HASH.fullmatch(revision) else _ref(storage, revision)
    if commit is None:
        return None
    snapshot = storage / "snapshots" / commit
    if not _complete(snapshot):
        return None
    try:
        found = inspect_path(snapshot)
    except OSError:
        return None
    return Snapshot(repo_id, commit, snapshot, found.size_bytes) if found.addable else None


def _ref(storage: Path, revision: str) -> str | None:
    try:
        commit = (storage / "refs" / revision).read_text().strip()
    except (OSError, ValueError):
        return None
    return commit if REGEX_COMMIT_HASH.fullmatch(commit) else None


def _complete(snapshot: Path) -> bool:
    """config.json and every shard the index names (a link to a missing blob does not count)."""
    if not (snapshot / "config.json").is_file():
        return False
    try:
        shards = set(json.loads((snapshot / INDEX).read_text())["weight_map"].values())
    except FileNotFoundError:
        return any(p.is_file() for p in snapshot.glob("*.safetensors"))
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return False
    return bool(shards) and all((snapshot / str(shard)).is_file() for shard in shards)
