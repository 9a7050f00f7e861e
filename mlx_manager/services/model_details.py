"""One model in full, as `mlx-manager show ID` prints it: where it is, what it is, how big, the
parsers and capabilities its probe found, and its chat template.

`model_details()` is the one place this is put together from the facade, so what a model gains
(per-model defaults, for one) joins here and every caller shows it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from sqlmodel import Session

from mlx_manager.services.local_models import local_model
from mlx_server.facade import ModelDefaults, read_chat_template


@dataclass(frozen=True)
class ModelDetails:
    id: str
    path: str
    source: str
    origin: str | None
    size_bytes: int
    bits: int | None  # quantization, from config.json; None: not quantized
    model_type: str
    probed_at: datetime | None  # None: type detected from the files, parsers not yet known
    family: str | None
    tool_parser: str | None
    thinking_parser: str | None
    capabilities: list[str]  # what the probe verified: tools, thinking, vision, ...
    practical_max_tokens: int | None
    chat_template: str  # "" when the model has none
    draft_model: str | None
    kv_bits: int | None
    defaults: ModelDefaults  # what requests that leave them out run with (only those set)


def model_details(session: Session, model_id: str) -> ModelDetails | None:
    """The model's details, or None when no model has this id."""
    model = local_model(session, model_id)
    if model is None:
        return None
    record, capabilities = model.record, model.capabilities
    return ModelDetails(
        id=record.id,
        path=record.path,
        source=str(record.source),
        origin=record.origin,
        size_bytes=record.size_bytes,
        bits=model.bits,
        model_type=model.model_type,
        probed_at=capabilities.probed_at if capabilities else None,
        family=capabilities.model_family if capabilities else None,
        tool_parser=capabilities.tool_parser_id if capabilities else None,
        thinking_parser=capabilities.thinking_parser_id if capabilities else None,
        capabilities=model.badges,
        practical_max_tokens=capabilities.practical_max_tokens if capabilities else None,
        chat_template=read_chat_template(Path(record.path)),
        draft_model=record.draft_model,
        kv_bits=record.kv_bits,
        defaults=ModelDefaults.from_stored(record.defaults),
    )
