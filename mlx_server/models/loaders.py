"""What a loaded model is, and how each model type loads (blueprint §10.1, §10.3).

One loader per type behind the same pool: text generation through mlx-lm, embeddings through
mlx-embeddings. Loaders run on the MLX thread; the pool decides when.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, Protocol

from sqlmodel import Session

from mlx_server.database import get_engine
from mlx_server.errors import APIError, ModelNotFoundError
from mlx_server.models.adapters import ModelAdapter, create_adapter
from mlx_server.models.cpu_weights import load_text_model, loaded_bytes_estimate
from mlx_server.models.defaults import ModelDefaults
from mlx_server.models.detection import (
    ModelType,
    detect_model_family,
    detect_model_type,
    read_chat_template,
    read_config,
)
from mlx_server.models.embedding_profile import EmbeddingProfile
from mlx_server.models.lora import adapter_bytes, adapter_directory, apply_adapter, find_adapter
from mlx_server.models.prompt_cache import PromptCache
from mlx_server.models.speech_profile import SpeechProfile
from mlx_server.records import ModelCapabilities, ModelRecord
from mlx_server.utils.memory import active_memory_bytes

logger = logging.getLogger("mlx_server.pool")

# mlx-lm's default group size for a quantized KV cache.
DEFAULT_KV_GROUP_SIZE = 64


@dataclass(frozen=True)
class ModelSpec:
    """What the pool needs to load a model, read from the database before loading."""

    model_id: str
    path: Path
    model_type: ModelType
    family: str
    capabilities: ModelCapabilities | None
    config: dict[str, Any]
    estimate_bytes: int
    # A LoRA adapter applied over the weights (models/lora.py; its size is in estimate_bytes).
    lora: Path | None = None
    # Generation options (records.ModelRecord): the draft model loaded beside this one for
    # speculative decoding (its estimate is part of `estimate_bytes`), and KV cache quantization.
    draft: DraftSpec | None = None
    kv_bits: int | None = None
    kv_group_size: int = DEFAULT_KV_GROUP_SIZE
    # What requests that leave them out run with (a LoRA variant: its base's).
    defaults: ModelDefaults = field(default_factory=ModelDefaults)


@dataclass(frozen=True)
class DraftSpec:
    model_id: str
    path: Path


class ShardedGroupHandle(Protocol):
    """A model whose forward passes run in a group of rank processes (mlx_server/distributed/
    group.py): the pool asks it before each use and closes it with the model; its generations
    take turns (one KV cache, on the ranks)."""

    turn: asyncio.Lock

    def check_available(self) -> None:
        """Raise the error a request gets while the group cannot serve (503, naming the node)."""

    def describe(self) -> dict[str, Any]:
        """The `sharded` marker of the model's listing: strategy, ranks, nodes."""

    def close(self) -> None:
        """Stop the group's ranks."""


@dataclass(eq=False)
class LoadedModel:
    model_id: str
    model_type: ModelType
    family: str
    model: Any
    tokenizer: Any
    # Text generation: the adapter (chat template, parsers, stop tokens); None for other types.
    adapter: ModelAdapter | None
    config: dict[str, Any]
    size_bytes: int
    probed: bool
    loaded_at: float = field(default_factory=time.time)
    last_used: float = field(default_factory=time.time)
    pinned: bool = False
    # A client's keep_alive (Ollama): seconds idle before the sweep unloads it, in place of the
    # pool's TTL (math.inf: never, 0: at once); None: the pool's TTL.
    keep_alive_s: float | None = None
    active: int = 0
    prompt_cache: PromptCache = field(default_factory=PromptCache.from_settings)
    # Embeddings: pooling, normalization, dimensions and the longest input.
    embedding: EmbeddingProfile | None = None
    # Text to speech: sample rate and voices.
    speech: SpeechProfile | None = None
    # Vision: mlx-vlm's processor (image preprocessing + tokenizer); `tokenizer` wraps its
    # tokenizer the way mlx-lm does, so the text pipeline (templates, parsers) is the same.
    processor: Any = None
    # Speculative decoding (services/pipeline/engine/speculative.py): the draft's weights live and die
    # with this model (counted in its size, leased with it); KV cache quantization.
    draft_id: str | None = None
    draft_model: Any = None
    kv_bits: int | None = None
    kv_group_size: int = DEFAULT_KV_GROUP_SIZE
    # Tokens generated with the draft since the load, and how many of them the draft proposed.
    speculative_tokens: int = 0
    draft_tokens: int = 0
    # The model's defaults (models/defaults.py), as read at its load; a request reads them again
    # after a change in this process, or a few seconds on (another process may have changed
    # them): services/operations/model_defaults.py::current_defaults.
    defaults: ModelDefaults = field(default_factory=ModelDefaults)
    defaults_read_at: float = field(default_factory=time.monotonic)
    defaults_version: int = -1
    # Its directory: a request for a model whose files went away is refused (pool.acquire).
    path: Path | None = None
    # A sharded model (mlx_server/distributed): `model` is its group's remote forward pass.
    sharded: ShardedGroupHandle | None = None

    @property
    def chat(self) -> ModelAdapter:
        """The text adapter; the pool hands text models only to the text pipeline."""
        assert self.adapter is not None, f"{self.model_id} is a {self.model_type} model"
        return self.adapter

    @property
    def context_length(self) -> int | None:
        """The most tokens it runs with: the model's default if set, else what it was trained for."""
        return self.defaults.context_length or self.trained_context_length

    @property
    def trained_context_length(self) -> int | None:
        return trained_context_length(self.config)


def trained_context_length(config: dict[str, Any]) -> int | None:
    value = config.get("max_position_embeddings") or config.get("max_seq_len")
    return int(value) if isinstance(value, int) and value > 0 else None


def files_missing(model_id: str, path: Path) -> APIError:
    """The refusal of a model whose directory went away (moved, deleted, an unplugged disk)."""
    return APIError(
        409,
        f"The files of model {model_id!r} are missing from {path}; put them back, or delete the model "
        "and add it again from where they are now.",
        param="model",
        code="model_files_missing",
    )


def generation_options(loaded: LoadedModel) -> dict[str, Any]:
    """The options a loaded model runs with, and its draft's share of the tokens since the load
    (the pool's status)."""
    rate = loaded.draft_tokens / loaded.speculative_tokens if loaded.speculative_tokens else None
    return {
        "draft_model": loaded.draft_id,
        "kv_bits": loaded.kv_bits,
        "kv_group_size": loaded.kv_group_size if loaded.kv_bits else None,
        "draft_acceptance_rate": round(rate, 4) if rate is not None else None,
    }


def read_spec(model_id: str) -> ModelSpec:
    with Session(get_engine()) as session:
        record = session.get(ModelRecord, model_id)
        lora = find_adapter(session, model_id) if record is None else None
        if lora is not None:  # "<base>+<adapter>": the base's files, type and capabilities
            record = session.get(ModelRecord, lora.base_model_id)
        if record is None:
            raise ModelNotFoundError(model_id)
        capabilities = session.get(ModelCapabilities, record.id)
        if capabilities is not None:
            session.expunge(capabilities)
    path = Path(record.path)
    if not (path / "config.json").is_file():
        raise files_missing(model_id, path)
    config = read_config(path)
    stored_type = ModelType(capabilities.model_type) if capabilities and capabilities.model_type else None
    family = capabilities.model_family if capabilities and capabilities.model_family else None
    if stored_type is None or family is None:
        logger.info("model %s was never probed: detecting its type and family", model_id)
    model_type = stored_type or detect_model_type(path, config)
    lora_path = adapter_directory(lora, model_type) if lora is not None else None
    draft = _draft_spec(record) if model_type == ModelType.TEXT_GEN else None
    draft_bytes = loaded_bytes_estimate(draft.path, read_config(draft.path)) if draft else 0
    return ModelSpec(
        model_id=model_id,
        path=path,
        model_type=model_type,
        family=family or detect_model_family(model_id, config, read_chat_template(path)),
        capabilities=capabilities,
        config=config,
        # Only text models load dequantized (cpu_weights.py); the others load as stored.
        lora=lora_path,
        estimate_bytes=(adapter_bytes(lora_path) if lora_path else 0)
        + loaded_bytes_estimate(path, config, as_text_model=model_type == ModelType.TEXT_GEN)
        + draft_bytes,
        draft=draft,
        kv_bits=record.kv_bits if model_type == ModelType.TEXT_GEN else None,
        kv_group_size=record.kv_group_size or DEFAULT_KV_GROUP_SIZE,
        defaults=ModelDefaults.from_stored(record.defaults),
    )


def _draft_spec(record: ModelRecord) -> DraftSpec | None:
    """The draft set for `record`, if its files are still there (else it loads without one)."""
    if record.draft_model is None:
        return None
    with Session(get_engine()) as session:
        draft = session.get(ModelRecord, record.draft_model)
    if draft is None or not (Path(draft.path) / "config.json").is_file():
        logger.warning("draft model %s of %s is gone: loading without it", record.draft_model, record.id)
        return None
    return DraftSpec(draft.id, Path(draft.path))


def _measured_load(spec: ModelSpec, load: Callable[[str], Any]) -> LoadedModel:
    """Load with `load(path)` -> (model, tokenizer); the size is the MLX memory it took (the
    files' size when nothing was measured). The adapter is the caller's to set."""
    before = active_memory_bytes()
    model, tokenizer = load(str(spec.path))
    measured = active_memory_bytes() - before
    return LoadedModel(
        model_id=spec.model_id,
        model_type=spec.model_type,
        family=spec.family,
        model=model,
        tokenizer=tokenizer,
        adapter=None,
        config=spec.config,
        size_bytes=measured if measured > 0 else spec.estimate_bytes,
        probed=spec.capabilities is not None,
        defaults=spec.defaults,
        path=spec.path,
    )


def _text_weights(path: str, lora: Path | None) -> tuple[Any, Any]:
    """The text model's weights (float32 on a fast-BLAS CPU), then its LoRA adapter if any:
    the adapter's layers wrap the dequantized ones."""
    model, tokenizer = load_text_model(path)
    if lora is not None:
        import mlx.core as mx

        apply_adapter(model, lora)
        mx.eval(model.parameters())
    return model, tokenizer


def _load_text_model(spec: ModelSpec) -> LoadedModel:
    loaded = _measured_load(spec, partial(_text_weights, lora=spec.lora))
    loaded.adapter = create_adapter(spec.family, loaded.tokenizer, spec.capabilities)
    loaded.kv_bits, loaded.kv_group_size = spec.kv_bits, spec.kv_group_size
    if spec.draft is not None:
        before = active_memory_bytes()
        loaded.draft_model, _ = load_text_model(str(spec.draft.path))
        loaded.draft_id = spec.draft.model_id
        loaded.size_bytes += max(0, active_memory_bytes() - before)
    return loaded


def _load_vision_model(spec: ModelSpec) -> LoadedModel:
    """mlx-vlm's load: the model, its processor (image preprocessing, tokenizer and the chat
    template from chat_template.json/.jinja); generation then runs mlx-vlm's generate_step."""
    from mlx_lm.tokenizer_utils import TokenizerWrapper
    from mlx_vlm.utils import load

    loaded = _measured_load(spec, load)
    loaded.processor = processor = loaded.tokenizer
    eos = spec.config.get("eos_token_id")
    loaded.tokenizer = TokenizerWrapper(
        processor.tokenizer,
        # mlx-vlm picked the streaming detokenizer for this tokenizer.json already; copied per use.
        detokenizer_class=lambda _tokenizer: processor.detokenizer,
        eos_token_ids=eos if isinstance(eos, list) else [eos] if eos is not None else None,
    )
    loaded.adapter = create_adapter(spec.family, loaded.tokenizer, spec.capabilities, images=True)
    return loaded


def _load_embedding_model(spec: ModelSpec) -> LoadedModel:
    from mlx_embeddings.utils import load

    loaded = _measured_load(spec, load)
    loaded.embedding = EmbeddingProfile.read(spec.path, spec.config)
    return loaded


def _load_rerank_model(spec: ModelSpec) -> LoadedModel:
    from mlx_server.models.cross_encoder import load_cross_encoder  # mlx-embeddings on first use

    return _measured_load(spec, load_cross_encoder)


def _load_speech_model(spec: ModelSpec) -> LoadedModel:
    from mlx_audio.tts.utils import load

    # mlx-audio picks the family from config.json's model_type; a Path (not a str) is never
    # looked up on the hub.
    loaded = _measured_load(spec, lambda path: (load(Path(path)), None))
    loaded.speech = SpeechProfile.read(loaded.model, spec.path)
    return loaded


def _load_transcription_model(spec: ModelSpec) -> LoadedModel:
    import mlx.core as mx
    from mlx_audio.stt.utils import load_model

    def load(path: str) -> tuple[Any, None]:
        model = load_model(Path(path))  # a Path is never looked up on the hub
        if not mx.metal.is_available() and getattr(model, "dtype", None) == mx.float16:
            # On a CPU-only MLX build half-precision matmuls run several times slower.
            model.set_dtype(mx.float32)
            model.dtype = mx.float32
        return model, None

    return _measured_load(spec, load)


LOADERS: dict[ModelType, Callable[[ModelSpec], LoadedModel]] = {
    ModelType.TEXT_GEN: _load_text_model,
    ModelType.EMBEDDINGS: _load_embedding_model,
    ModelType.VISION: _load_vision_model,
    ModelType.SPEECH_TO_TEXT: _load_transcription_model,
    ModelType.TEXT_TO_SPEECH: _load_speech_model,
    ModelType.RERANK: _load_rerank_model,
}

# The endpoint that serves each type, for errors that send a request to the right one.
ENDPOINTS: dict[ModelType, str] = {
    ModelType.TEXT_GEN: "/v1/chat/completions",
    ModelType.EMBEDDINGS: "/v1/embeddings",
    ModelType.VISION: "/v1/chat/completions",
    ModelType.SPEECH_TO_TEXT: "/v1/audio/transcriptions",
    ModelType.TEXT_TO_SPEECH: "/v1/audio/speech",
    ModelType.RERANK: "/v1/rerank",
}
