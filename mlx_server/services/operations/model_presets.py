"""Ollama's /api/create: a named preset of a model, as Ollama users make one with a Modelfile's
FROM, SYSTEM and PARAMETER lines.

A preset is a second name for the same files (`copy_model`: nothing is copied) with its own
defaults (models/defaults.py): the source's, then the request's system prompt and parameters on
top. Requests for the preset run the source's weights with those defaults, on every protocol.
What cannot be honoured is refused before anything is written, naming what to send instead:
Go templates (the model's own Jinja chat template is what renders a prompt here), GGUF blobs and
adapters (`files`, `adapters`: add them with `mlx-manager models add` / the LoRA section),
seeded `messages`, and `quantize`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sqlmodel import Session

from mlx_server.errors import APIError
from mlx_server.models.defaults import ModelDefaults, ModelDefaultsError
from mlx_server.models.detection import read_chat_template
from mlx_server.models.store import ModelStoreError, get_model
from mlx_server.records import ModelRecord
from mlx_server.services.operations.model_defaults import set_model_defaults
from mlx_server.services.operations.model_files import copy_model, delete_model
from mlx_server.services.operations.ollama_models import OLLAMA_PARAMETERS

# Ollama's parameter name -> the ModelDefaults field it sets.
_FIELDS = {name: field for field, name in OLLAMA_PARAMETERS.items()}
# What a Modelfile can say that a preset here cannot keep, and what to do instead.
_UNSUPPORTED = {
    "files": "GGUF or safetensors blobs cannot be uploaded here; import the file on this machine with "
    "`mlx-manager models add PATH` (or import-gguf), then create from that model",
    "adapters": "adapters are registered per model: POST /v1/admin/lora-adapters (or the model page's "
    "LoRA section), then request '<model>+<adapter>'",
    "messages": "a preset keeps no conversation; send the messages with each request",
    "quantize": "quantize a model with `mlx-manager models convert PATH --bits 4` (or the models page's "
    "Convert)",
}


def refuse_unsupported(fields: dict[str, Any]) -> None:
    """A 400 for the first Modelfile field given (not null, not empty) that a preset cannot keep."""
    for name, why in _UNSUPPORTED.items():
        if fields.get(name):
            raise APIError(400, f"`{name}` is not supported by /api/create here: {why}.", param=name)


def preset_defaults(source: ModelDefaults, system: str | None, parameters: dict[str, Any]) -> ModelDefaults:
    """The preset's defaults: the source's, with the request's system prompt and parameters."""
    changes: dict[str, Any] = {}
    for name, value in parameters.items():
        field = _FIELDS.get(name)
        if field is None:
            known = ", ".join(sorted(_FIELDS))
            raise APIError(
                400,
                f"The parameter {name!r} cannot be kept with a model here; the ones that can: {known}.",
                param=f"parameters.{name}",
            )
        changes[field] = value
    if system is not None:
        changes["system_prompt"] = system or None
    try:
        return source.changed(changes)
    except ModelDefaultsError as exc:
        raise APIError(400, str(exc), param="parameters") from None


def _check_template(template: str | None, source: ModelRecord) -> None:
    """Ollama's TEMPLATE is a Go template; ours are the model's Jinja chat template. The model's
    own (as /api/show returns it, so a client copying a model's Modelfile works) is accepted."""
    if template is None or template.strip() == read_chat_template(Path(source.path)).strip():
        return
    raise APIError(
        400,
        f"A preset uses {source.id}'s own chat template: Ollama's Go templates cannot render a prompt "
        "here. Leave `template` out (or send the one /api/show returns).",
        param="template",
    )


def create_preset(
    session: Session,
    name: str,
    source_id: str,
    *,
    system: str | None,
    parameters: dict[str, Any],
    template: str | None,
) -> ModelRecord:
    """Register `name` as `source_id`'s files with its own defaults; refused with a 4xx (and
    nothing written) when the name exists or a value does not fit the model."""
    source = get_model(session, source_id)
    if source is None:
        raise APIError(404, f"model '{source_id}' not found", param="from")
    _check_template(template, source)
    defaults = preset_defaults(ModelDefaults.from_stored(source.defaults), system, parameters)
    if get_model(session, name) is not None:
        raise APIError(409, f"A model named {name!r} exists; delete it first.", param="model")
    try:
        preset = copy_model(session, source_id, name)
    except ModelStoreError as exc:
        raise APIError(400, str(exc), param="model") from exc
    try:
        set_model_defaults(session, name, defaults)  # checked against the model's config (context length)
    except APIError:
        delete_model(session, name)  # a second name: its files stay with the source
        raise
    return preset
