"""A model's generation options (the admin API and the model page): a draft model for
speculative decoding and KV cache quantization, checked, stored on its models row and applied
by reloading the model if it is loaded (services/pipeline/engine/speculative.py runs them)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from sqlmodel import Session

from mlx_server.errors import APIError, ModelNotFoundError
from mlx_server.models.detection import ModelType
from mlx_server.models.loaders import DEFAULT_KV_GROUP_SIZE, read_spec
from mlx_server.models.pool import get_model_pool
from mlx_server.models.store import list_models
from mlx_server.records import ModelRecord

KV_BITS = (4, 8)
# Group sizes MLX's quantization supports.
KV_GROUP_SIZES = (32, 64, 128)


@dataclass(frozen=True)
class ModelOptions:
    model_id: str
    draft_model: str | None = None
    kv_bits: int | None = None
    kv_group_size: int = DEFAULT_KV_GROUP_SIZE


def _options(record: ModelRecord) -> ModelOptions:
    return ModelOptions(
        record.id, record.draft_model, record.kv_bits, record.kv_group_size or DEFAULT_KV_GROUP_SIZE
    )


def model_options(session: Session, model_id: str) -> ModelOptions:
    record = session.get(ModelRecord, model_id)
    if record is None:
        raise ModelNotFoundError(model_id)
    return _options(record)


def _is_text_model(model_id: str) -> bool:
    try:
        return read_spec(model_id).model_type == ModelType.TEXT_GEN
    except APIError:  # its files are gone
        return False


def draft_candidates(session: Session, model_id: str) -> list[str]:
    """Local text models that could draft for `model_id` (the vocabulary is checked on save)."""
    ids = [record.id for record in list_models(session) if record.id != model_id]
    return [i for i in ids if _is_text_model(i)]


def _vocabulary(path: str) -> dict[str, int]:
    from transformers import AutoTokenizer

    vocabulary: dict[str, int] = AutoTokenizer.from_pretrained(path).get_vocab()
    return vocabulary


def _invalid(message: str, param: str) -> APIError:
    return APIError(400, message, param=param, code="invalid_model_options")


async def _check_draft(session: Session, model_id: str, draft_id: str) -> None:
    if draft_id == model_id:
        raise _invalid(
            f"{model_id!r} cannot draft for itself; pick a smaller model with its vocabulary.", "draft_model"
        )
    draft, target = session.get(ModelRecord, draft_id), session.get(ModelRecord, model_id)
    if target is None:
        raise ModelNotFoundError(model_id)
    if draft is None:
        raise _invalid(
            f"There is no model {draft_id!r} to draft with; GET /v1/models lists them.", "draft_model"
        )
    if not _is_text_model(draft_id):
        raise _invalid(f"The draft {draft_id!r} is not a local text generation model.", "draft_model")
    try:
        same = await asyncio.gather(
            asyncio.to_thread(_vocabulary, draft.path), asyncio.to_thread(_vocabulary, target.path)
        )
    except (OSError, ValueError) as exc:
        raise _invalid(
            f"The tokenizer of {draft_id!r} or {model_id!r} could not be read: {exc}", "draft_model"
        ) from None
    if same[0] != same[1]:
        raise _invalid(
            f"The draft {draft_id!r} has another vocabulary than {model_id!r} ({len(same[0])} vs "
            f"{len(same[1])} tokens, or the same tokens under other ids); a draft must share the "
            "model's tokenizer.",
            "draft_model",
        )


def _check_kv(kv_bits: int | None, kv_group_size: int) -> None:
    if kv_bits is not None and kv_bits not in KV_BITS:
        raise _invalid(f"kv_bits must be 4, 8 or null (not quantized), not {kv_bits}.", "kv_bits")
    if kv_group_size not in KV_GROUP_SIZES:
        raise _invalid(f"kv_group_size must be one of 32, 64, 128, not {kv_group_size}.", "kv_group_size")


async def set_model_options(
    session: Session,
    model_id: str,
    *,
    draft_model: str | None,
    kv_bits: int | None,
    kv_group_size: int | None = None,
) -> ModelOptions:
    """Check, store and apply: a loaded model reloads with the new options (pinned stays
    pinned); refused (409) while it serves requests."""
    group_size = kv_group_size or DEFAULT_KV_GROUP_SIZE
    current = model_options(session, model_id)
    if not _is_text_model(model_id):
        raise _invalid(
            f"{model_id!r} is not a text generation model; these options apply to text models.", "model"
        )
    _check_kv(kv_bits, group_size)
    if draft_model is not None and draft_model != current.draft_model:
        await _check_draft(session, model_id, draft_model)
    pool = get_model_pool()
    loaded = pool.get_loaded(model_id)
    if loaded is not None and loaded.active:
        raise APIError(
            409,
            f"Model {model_id!r} is serving {loaded.active} request(s); change its options when they finish.",
            param="model",
            code="model_busy",
        )
    record = session.get(ModelRecord, model_id)
    if record is None:
        raise ModelNotFoundError(model_id)
    record.draft_model, record.kv_bits = draft_model, kv_bits
    record.kv_group_size = None if group_size == DEFAULT_KV_GROUP_SIZE else group_size
    session.add(record)
    session.commit()
    options = _options(record)
    if loaded is not None:
        pinned = loaded.pinned
        await pool.unload(model_id)
        await pool.preload(model_id, pin=pinned)
    return options


async def update_model_options(session: Session, model_id: str, changes: dict[str, Any]) -> ModelOptions:
    """PATCH: the fields in `changes` replace the stored ones, the others stay."""
    merged = {**vars(model_options(session, model_id)), **changes}
    return await set_model_options(
        session,
        model_id,
        draft_model=merged["draft_model"],
        kv_bits=merged["kv_bits"],
        kv_group_size=merged["kv_group_size"],
    )
