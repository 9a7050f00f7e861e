"""Deleting and copying registered models: what the dashboard's Delete and Ollama's
/api/delete and /api/copy do.

A copy is a second name for the same files (a row pointing at the same directory, with the
probe's capabilities copied): no weights are copied. Deleting a name removes files only when no
other name points at them; then imported models (GGUF, the bundled defaults) in our models
directory are removed, hub downloads leave the hub cache through huggingface_hub's own cache
bookkeeping, and a directory the user registered (in place, or outside our models directory)
keeps its files.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from huggingface_hub import scan_cache_dir
from huggingface_hub.errors import CacheNotFound, CorruptedCacheException
from sqlmodel import Session, select

from mlx_server.config import get_settings
from mlx_server.models.pool import get_model_pool
from mlx_server.models.store import ModelStoreError, get_model, validate_model_id
from mlx_server.records import ModelCapabilities, ModelRecord, ModelSource, utcnow
from mlx_server.services.operations.probe import is_probe_running


def delete_model(session: Session, model_id: str) -> str:
    """Unregister a model and remove the files we own; returns what was done, for the page.

    Refused while the model is loaded or being probed: unloading first is the caller's call.
    """
    record = get_model(session, model_id)
    if record is None:
        raise ModelStoreError(f"There is no model {model_id!r}.")
    if get_model_pool().get_loaded(model_id) is not None:
        raise ModelStoreError(f"{model_id} is loaded; unload it before deleting it.")
    if is_probe_running(model_id):
        raise ModelStoreError(f"{model_id} is being probed; delete it once the probe has finished.")
    path = Path(record.path)
    others = [
        r.id
        for r in session.exec(select(ModelRecord).where(ModelRecord.path == record.path))
        if r.id != model_id
    ]
    if others:
        done = f"Removed the name {model_id}; its files stay for {', '.join(sorted(others))} ({path})."
    elif keeps_files(record):
        done = f"Removed {model_id} from the list; its files stay in {path}."
    elif record.source == ModelSource.HUB:
        done = _delete_from_hub_cache(model_id, path)
    else:  # files in our models directory are ours: imports, copies, conversions, the defaults
        shutil.rmtree(path, ignore_errors=True)
        done = f"Deleted {model_id} and its files ({path})."
    capabilities = session.get(ModelCapabilities, model_id)
    if capabilities is not None:
        session.delete(capabilities)
    session.delete(record)
    session.commit()
    return done


def keeps_files(record: ModelRecord) -> bool:
    """Whether deleting the model only unregisters it: registered in place (the user's own
    directory), or anywhere outside our models directory but the hub cache."""
    if record.source == ModelSource.IN_PLACE:
        return True
    return record.source != ModelSource.HUB and not Path(record.path).is_relative_to(
        get_settings().models_dir
    )


def _delete_from_hub_cache(model_id: str, snapshot: Path) -> str:
    """The snapshot's revision, through huggingface_hub's own cache bookkeeping (blobs shared
    with other revisions stay)."""
    cache_dir = snapshot.parent.parent.parent  # <cache>/models--org--name/snapshots/<commit>
    try:
        strategy = scan_cache_dir(cache_dir).delete_revisions(snapshot.name)
    except (OSError, CacheNotFound, CorruptedCacheException) as exc:
        return f"Removed {model_id} from the list; its hub cache files could not be read ({exc})."
    strategy.execute()
    return f"Deleted {model_id} and {strategy.expected_freed_size_str} from the hub cache."


def copy_model(session: Session, source_id: str, destination_id: str) -> ModelRecord:
    """Register `destination_id` as a second name for `source_id`'s files (capabilities and
    defaults too, as Ollama's copy keeps a model's parameters).
    An existing destination is refused, never overwritten."""
    source = get_model(session, source_id)
    if source is None:
        raise ModelStoreError(f"There is no model {source_id!r}.")
    validate_model_id(destination_id)
    if get_model(session, destination_id) is not None:
        raise ModelStoreError(f"A model named {destination_id!r} already exists; delete it first.")
    copy = ModelRecord(
        id=destination_id,
        source=source.source,
        path=source.path,
        size_bytes=source.size_bytes,
        origin=source.origin,
        created_at=utcnow(),
        draft_model=source.draft_model,
        kv_bits=source.kv_bits,
        kv_group_size=source.kv_group_size,
        defaults=source.defaults,
    )
    session.add(copy)
    capabilities = session.get(ModelCapabilities, source_id)
    if capabilities is not None:
        fields = capabilities.model_dump(exclude={"model_id"})
        session.add(ModelCapabilities(model_id=destination_id, **fields))
    session.commit()
    session.refresh(copy)
    return copy
