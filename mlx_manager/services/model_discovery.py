"""Models on this machine that are not registered: the Hugging Face cache, LM Studio's models
folder, the folders listed in the "model folders" setting and our own models directory.

Each is classified from its files (the facade's `inspect_path`: an MLX model to add, a
checkpoint to convert, a GGUF file for the importer, or why it cannot be used) without loading
anything. The hub cache is read with huggingface_hub's own `scan_cache_dir` (its location is
the hub settings' cache, by default `HF_HUB_CACHE` / `HF_HOME`), each repo's snapshot found
through its `refs/` (main first).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from huggingface_hub import scan_cache_dir
from huggingface_hub.errors import CacheNotFound, CorruptedCacheException
from sqlmodel import Session

from mlx_manager.services.hub import load_hub_config
from mlx_manager.services.settings_store import Setting, SettingError, get_setting, set_setting
from mlx_server.facade import (
    DiskModel,
    expand_user,
    get_server_settings,
    inspect_path,
    list_models,
    suggested_model_id,
)

logger = logging.getLogger("mlx_manager.discovery")

Where = Literal["Hugging Face cache", "LM Studio", "folder", "models directory"]
MAX_FOUND = 500  # a folder of thousands of files is not a models folder

MODEL_FOLDERS: Setting[list[str]] = Setting(
    "model_folders",
    list,
    list,
    "Folders searched for models (a model directory or .gguf file, two levels deep)",
)


def lm_studio_roots() -> list[Path]:
    """Where LM Studio keeps models: ~/.lmstudio/models, older versions ~/.cache/lm-studio/models."""
    home = Path.home()
    return [home / ".lmstudio" / "models", home / ".cache" / "lm-studio" / "models"]


@dataclass(frozen=True)
class FoundModel:
    where: Where
    name: str  # the repo id, publisher/repo, or the path under the folder
    disk: DiskModel

    @property
    def path(self) -> Path:
        return self.disk.path

    @property
    def suggested_id(self) -> str:
        return self.name if self.where == "Hugging Face cache" else suggested_model_id(self.path)

    @property
    def status(self) -> str:
        """What the page and `models scan` say: addable, "not an MLX model: convert", or why not."""
        if self.disk.kind == "checkpoint":
            return "not an MLX model: convert"
        if self.disk.kind == "pytorch":
            return "not an MLX model"
        return "addable" if self.disk.addable else "cannot be used"


def model_folders(session: Session) -> list[Path]:
    return [Path(folder) for folder in get_setting(session, MODEL_FOLDERS) if isinstance(folder, str)]


def save_model_folders(session: Session, text: str) -> list[Path]:
    """The folders typed one per line (absolute; `~` expanded); SettingError names a bad one."""
    folders = []
    for line in text.splitlines():
        if not line.strip():
            continue
        folder = expand_user(Path(line.strip())) if line.strip().startswith("~/") else Path(line.strip())
        if not folder.is_absolute():
            raise SettingError(f"{line.strip()!r} is not an absolute path; write it from / (or ~/).")
        folders.append(str(folder))
    set_setting(session, MODEL_FOLDERS, list(dict.fromkeys(folders)) or None)
    return model_folders(session)


def scan_models(session: Session, extra_folders: tuple[Path, ...] = ()) -> list[FoundModel]:
    """Unregistered models found on this machine, by place then name."""
    registered = {Path(record.path).resolve() for record in list_models(session)}
    cache_dir = load_hub_config(session).cache_dir
    places: list[Iterator[FoundModel]] = [_hub_cache(cache_dir)]
    places += [_folder(root, "LM Studio") for root in lm_studio_roots()]
    places += [_folder(root, "folder") for root in (*model_folders(session), *extra_folders)]
    places.append(_folder(get_server_settings().models_dir, "models directory"))
    found: dict[Path, FoundModel] = {}
    for place in places:
        for model in place:
            resolved = model.path.resolve()
            if resolved not in registered and resolved not in found:
                found[resolved] = model
            if len(found) >= MAX_FOUND:
                break
    return list(found.values())


def _hub_cache(cache_dir: Path) -> Iterator[FoundModel]:
    try:
        cache = scan_cache_dir(cache_dir)
    except (CacheNotFound, CorruptedCacheException, OSError):
        return
    for warning in cache.warnings:
        logger.info("hub cache %s: %s", cache_dir, warning)
    for repo in sorted(cache.repos, key=lambda r: r.repo_id):
        if repo.repo_type != "model":
            continue
        revision = repo.refs.get("main") or next(iter(repo.refs.values()), None)
        if revision is None:  # no ref names a snapshot: the newest one
            revision = max(repo.revisions, key=lambda r: r.last_modified, default=None)
        if revision is not None and (model := _inspect(revision.snapshot_path)) is not None:
            yield FoundModel("Hugging Face cache", repo.repo_id, model)


def _folder(root: Path, where: Where) -> Iterator[FoundModel]:
    """Model directories (config.json) and GGUF files up to three levels under `root`: a
    models folder's `<name>/` and LM Studio's `<publisher>/<repo>/` (GGUF files inside)."""
    for candidate in _candidates(root, depth=2):
        if (model := _inspect(candidate)) is not None:
            yield FoundModel(where, candidate.relative_to(root).as_posix(), model)


def _candidates(directory: Path, depth: int) -> Iterator[Path]:
    try:
        entries = sorted(directory.iterdir())
    except OSError:
        return
    for entry in entries:
        if entry.name.startswith(".") or entry.name.endswith(".partial"):
            continue  # staging directories, hidden files
        gguf = entry.is_file() and entry.suffix.lower() == ".gguf"
        if gguf or (entry.is_dir() and (entry / "config.json").is_file()):
            yield entry
        elif entry.is_dir() and depth > 0:
            yield from _candidates(entry, depth - 1)


def _inspect(path: Path) -> DiskModel | None:
    try:
        return inspect_path(path)
    except OSError:
        return None
