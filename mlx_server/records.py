"""Database tables owned by the server (one SQLite file shared with the manager).

The schema is owned by the Alembic migrations in `mlx_server/migrations/`; these classes must
match them exactly (tests/test_database.py checks there is no drift).
"""

from __future__ import annotations

from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from sqlalchemy import JSON, Column, String
from sqlmodel import Field, SQLModel


def utcnow() -> datetime:
    return datetime.now(UTC)


class ModelSource(StrEnum):
    HUB = "hub"
    GGUF_IMPORT = "gguf-import"
    # Copied into our models directory (the bundled defaults, `models add --copy`).
    LOCAL = "local"
    # Registered where it lies (`models add PATH`): deleting the model never touches its files.
    IN_PLACE = "in-place"
    # Made here by mlx-lm's conversion (services/operations/conversion.py), in our models directory.
    CONVERTED = "converted"


class ModelRecord(SQLModel, table=True):
    """A model on disk that the server can load."""

    __tablename__ = "models"

    id: str = Field(primary_key=True, max_length=255)
    # Stored as its value ("gguf-import"), not the enum member name.
    source: ModelSource = Field(sa_type=String(32))
    path: str
    size_bytes: int = 0
    # Where it came from: the GGUF file path, the hub repo id, or the local directory.
    origin: str | None = None
    created_at: datetime = Field(default_factory=utcnow)
    # Generation options (services/operations/model_options.py): the id of another local text
    # model with the same vocabulary that drafts tokens for speculative decoding, and the KV
    # cache's quantization (4 or 8 bits, None: not quantized; group size None: mlx-lm's 64).
    draft_model: str | None = Field(default=None, max_length=255)
    kv_bits: int | None = None
    kv_group_size: int | None = None
    # What the model runs with when a request leaves it out: models/defaults.py's ModelDefaults
    # as JSON (only the keys set; None: none set).
    defaults: dict[str, Any] | None = Field(default=None, sa_column=Column(JSON))
    # The quantization it was imported from (a GGUF's type, e.g. "Q4_K_M"); None: not imported.
    source_quantization: str | None = Field(default=None, max_length=32)


class ModelCapabilities(SQLModel, table=True):
    """Everything needed to configure a model without runtime detection (blueprint §11)."""

    __tablename__ = "model_capabilities"

    model_id: str = Field(primary_key=True, max_length=255)

    model_type: str | None = None
    model_family: str | None = None

    tool_parser_id: str | None = None
    thinking_parser_id: str | None = None

    supports_native_tools: bool | None = None
    supports_thinking: bool | None = None
    tool_format: str | None = None
    practical_max_tokens: int | None = None

    supports_multi_image: bool | None = None
    supports_video: bool | None = None

    embedding_dimensions: int | None = None
    max_sequence_length: int | None = None
    is_normalized: bool | None = None
    # sentence-transformers pooling: mean, cls, max, mean_sqrt_len, lasttoken; "model" = its own.
    embedding_pooling: str | None = Field(default=None, max_length=16)

    supports_tts: bool | None = None
    supports_stt: bool | None = None

    probed_at: datetime = Field(default_factory=utcnow)
    probe_version: int = 3


class AuditState(StrEnum):
    """Where a request's row is: written when the request arrived and not ended yet, ended
    (status and figures filled in), or cut off by a crash or kill of the server."""

    IN_FLIGHT = "in_flight"
    COMPLETED = "completed"
    INTERRUPTED = "interrupted"


class AuditLog(SQLModel, table=True):
    """One row per /v1 request, written by `services.audit.AuditService` when the request
    arrives and completed when it ends."""

    __tablename__ = "audit_log"

    id: int | None = Field(default=None, primary_key=True)
    request_id: str = Field(index=True, max_length=64)
    created_at: datetime = Field(default_factory=utcnow, index=True)
    endpoint: str = Field(max_length=128, index=True)
    model: str | None = Field(default=None, index=True, max_length=255)
    # None until the response ended (in flight, or interrupted).
    status: int | None = Field(default=None, index=True)
    latency_ms: float | None = None
    # Stored as its value ("in_flight"); rows of earlier versions were written complete.
    state: str = Field(default=AuditState.COMPLETED, max_length=16, index=True)
    # Time to first token of a generation (streamed or not); None where nothing is generated.
    ttft_ms: float | None = None
    # Which API shape the request used: "openai" or "anthropic".
    protocol: str | None = Field(default=None, max_length=16)
    stream: bool | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    # Seconds of audio spoken (/v1/audio/speech) or heard (/v1/audio/transcriptions).
    audio_seconds: float | None = None
    error: str | None = None
    # The generation parameters the client set (temperature, max_tokens, ...); never the prompt.
    parameters: dict[str, Any] | None = Field(default=None, sa_column=Column(JSON))
    # The name of the API key the request was made with (None: no key was needed or sent).
    key_name: str | None = Field(default=None, index=True, max_length=64)
    # The remote backend that answered (services/remote); None when a local model did.
    backend: str | None = Field(default=None, index=True, max_length=64)
    # What the reply did not deliver: a rejected tool call and why, a required call not made.
    warnings: list[str] | None = Field(default=None, sa_column=Column(JSON))


class ApiKeyScope(StrEnum):
    INFERENCE = "inference"  # every /v1 route but /v1/admin/*
    ADMIN = "admin"  # every /v1 route


class ApiKey(SQLModel, table=True):
    """A key for /v1; only its SHA-256 is stored (the key itself is shown once, at creation)."""

    __tablename__ = "api_keys"

    id: int | None = Field(default=None, primary_key=True)
    name: str = Field(max_length=64, unique=True, index=True)
    # The key's first characters, shown in lists so a user can tell keys apart.
    prefix: str = Field(max_length=16)
    key_hash: str = Field(max_length=64, unique=True, index=True)
    scope: ApiKeyScope = Field(sa_type=String(16))
    created_at: datetime = Field(default_factory=utcnow)
    expires_at: datetime | None = None
    revoked_at: datetime | None = None
    requests_per_minute: int | None = None
    tokens_per_day: int | None = None


class SettingOverride(SQLModel, table=True):
    """A setting changed at run time (from the dashboard); value is JSON text."""

    __tablename__ = "setting_overrides"

    key: str = Field(primary_key=True, max_length=128)
    value: str
    updated_at: datetime = Field(default_factory=utcnow)


class LoraAdapter(SQLModel, table=True):
    """A LoRA adapter directory (mlx-lm's format) over a local text model, served as the model
    id "<base_model_id>+<name>" (models/lora.py)."""

    __tablename__ = "lora_adapters"

    id: str = Field(primary_key=True, max_length=255)  # "<base_model_id>+<name>"
    base_model_id: str = Field(max_length=255, index=True)
    name: str = Field(max_length=64)
    path: str
    size_bytes: int = 0  # adapters.safetensors
    created_at: datetime = Field(default_factory=utcnow)


class BackendKind(StrEnum):
    OPENAI = "openai"  # POST {base_url}/chat/completions, GET {base_url}/models
    ANTHROPIC = "anthropic"  # POST {base_url}/v1/messages, GET {base_url}/v1/models


class RemoteBackend(SQLModel, table=True):
    """An upstream server requests can be routed to (services/remote); its key is never shown."""

    __tablename__ = "remote_backends"

    id: int | None = Field(default=None, primary_key=True)
    name: str = Field(max_length=64, unique=True, index=True)
    kind: str = Field(sa_type=String(16))  # a BackendKind value
    # What the kind's SDK takes as base_url: ".../v1" for OpenAI, the root for Anthropic.
    base_url: str = Field(max_length=512)
    api_key: str | None = Field(default=None, max_length=512)
    connect_timeout_s: float = 5.0
    read_timeout_s: float = 120.0
    # The model ids it serves, from its /models (refreshable).
    models: list[str] = Field(default_factory=list, sa_column=Column(JSON, nullable=False))
    models_refreshed_at: datetime | None = None
    created_at: datetime = Field(default_factory=utcnow)


class RoutingRule(SQLModel, table=True):
    """A model id or glob pattern -> ordered targets ([{"backend": name | None, "model": id}]);
    rules are tried by position, the first healthy target serves."""

    __tablename__ = "routing_rules"

    id: int | None = Field(default=None, primary_key=True)
    pattern: str = Field(max_length=255, unique=True, index=True)
    targets: list[dict[str, Any]] = Field(default_factory=list, sa_column=Column(JSON, nullable=False))
    position: int = 0
    created_at: datetime = Field(default_factory=utcnow)


class StoredResponse(SQLModel, table=True):
    """A Responses API response saved for `previous_response_id` and GET /v1/responses/{id}
    (services/operations/responses_store.py); pruned with the audit log's retention."""

    __tablename__ = "responses"

    id: str = Field(primary_key=True, max_length=64)
    created_at: datetime = Field(default_factory=utcnow, index=True)
    model: str = Field(max_length=255)
    previous_response_id: str | None = Field(default=None, max_length=64)
    # The conversation before this request's input (the previous responses' inputs and outputs).
    history: list[dict[str, Any]] = Field(default_factory=list, sa_column=Column(JSON, nullable=False))
    # This request's input items, each with its id (GET /v1/responses/{id}/input_items).
    input_items: list[dict[str, Any]] = Field(default_factory=list, sa_column=Column(JSON, nullable=False))
    # The response object as it was returned.
    body: dict[str, Any] = Field(default_factory=dict, sa_column=Column(JSON, nullable=False))


class ClusterNode(SQLModel, table=True):
    """Another MLX Manager or mlx-server this one can serve sharded models with
    (mlx_server/distributed/nodes.py); reached over HTTP with one of its admin API keys, which is
    stored to be sent and never shown back."""

    __tablename__ = "cluster_nodes"

    id: int | None = Field(default=None, primary_key=True)
    name: str = Field(max_length=64, unique=True, index=True)
    # Its root URL (http://host:port), as given when it was added.
    url: str = Field(max_length=512)
    api_key: str = Field(max_length=512)
    created_at: datetime = Field(default_factory=utcnow)
