"""The one seam between `mlx_manager` and `mlx_server`: the manager imports from this module only
(tests/test_architecture.py checks it), so a server change that keeps these names keeps it working."""

from __future__ import annotations

from mlx_server import __version__
from mlx_server.api.error_shapes import ContainErrors
from mlx_server.api.metrics import PageAccess, metrics_router
from mlx_server.api.path_aliases import PathAliases
from mlx_server.api.request_guard import GuardPolicy, RequestGuard, is_cross_site, limit_body
from mlx_server.benchmark.report import bench_arguments, publish
from mlx_server.cli import HELP_OPTIONS, BareHelpGroup, version_option
from mlx_server.config import DEFAULT_HOME, MLXServerSettings, SettingsSlot, is_loopback
from mlx_server.config import get_settings as get_server_settings
from mlx_server.config import use_settings as use_server_settings
from mlx_server.database import SessionDep, background_session, database_status, upgrade_database
from mlx_server.distributed import nodes as cluster_nodes
from mlx_server.distributed import service as sharded_service
from mlx_server.distributed.node_info import node_report
from mlx_server.errors import APIError, ModelNotFoundError
from mlx_server.home_lock import HomeInUse, ServingProcess, lock_home, serving_process
from mlx_server.main import create_app as create_server_app
from mlx_server.main import health_router, server_services
from mlx_server.models.defaults import ModelDefaults, ModelDefaultsError, parse_assignments
from mlx_server.models.detection import ModelType, detect_model_type, read_chat_template
from mlx_server.models.disk import DiskModel, expand_user, inspect_path
from mlx_server.models.gguf_file import Quantization as GGUFQuantization
from mlx_server.models.gguf_import import GGUFImportError, GGUFInfo, inspect_gguf
from mlx_server.models.store import (
    ModelStoreError,
    add_model,
    default_whisper_dir,
    ensure_default_models,
    get_model,
    import_gguf,
    import_whisper,
    list_models,
    suggested_model_id,
    validate_model_id,
)
from mlx_server.models.whisper_import import WhisperImportError
from mlx_server.observability import configure_tracing
from mlx_server.records import (
    ApiKey,
    ApiKeyScope,
    AuditLog,
    AuditState,
    ModelCapabilities,
    ModelRecord,
    ModelSource,
    utcnow,
)
from mlx_server.schemas.openai import ToolCall
from mlx_server.services.images import ImageRejected, LoadedImage, decode_image_data
from mlx_server.services.operations.api_keys import (
    ApiKeyError,
    KeyState,
    NewApiKey,
    bind_refusal,
    create_api_key,
    key_state,
    keys_exist,
    list_api_keys,
    revoke_api_key,
)
from mlx_server.services.operations.audit import (
    MAX_RETENTION_DAYS,
    audit_retention,
    audit_service,
    set_audit_retention,
)
from mlx_server.services.operations.audit_search import (
    AuditFilter,
    distinct_values,
    ended_rows,
    iter_batches,
    latest_id,
    page_before,
    rows_after,
)
from mlx_server.services.operations.audit_search import count as count_audit_rows
from mlx_server.services.operations.conversion import (
    CONVERT_BITS,
    CONVERT_GROUP_SIZES,
    ConversionPlan,
    ConversionProgress,
    convert_model,
    plan_conversion,
)
from mlx_server.services.operations.engine_samples import EngineSample, engine_samples
from mlx_server.services.operations.generation_defaults import (
    MAX_DEFAULT_MAX_TOKENS,
    default_max_tokens_setting,
    set_default_max_tokens,
)
from mlx_server.services.operations.lora_adapters import (
    AdapterView,
    adapter_views,
    register_adapter,
    remove_adapter,
)
from mlx_server.services.operations.model_benchmark import (
    BENCHMARK_SIZES,
    BenchmarkFigures,
    BenchmarkProgress,
    benchmark_model,
    check_benchmark,
)
from mlx_server.services.operations.model_defaults import (
    model_defaults,
    set_model_defaults,
    update_model_defaults,
)
from mlx_server.services.operations.model_files import delete_model, keeps_files
from mlx_server.services.operations.model_options import (
    KV_BITS,
    KV_GROUP_SIZES,
    ModelOptions,
    draft_candidates,
    model_options,
    set_model_options,
)
from mlx_server.services.operations.model_pulls import PullProgress, set_model_puller
from mlx_server.services.operations.model_registration import (
    add_model_from_disk,
    set_probe_starter,
    start_arrival_probe,
)
from mlx_server.services.operations.pool_admin import (
    PoolLimits,
    PoolState,
    load_model,
    memory_budget_bytes,
    pool_limits,
    pool_state,
    pool_status,
    pool_summary,
    reset_pool_limits,
    set_pinned,
    set_pool_limits,
    unload_all,
    unload_model,
)
from mlx_server.services.operations.probe import is_probe_running, probe_model
from mlx_server.services.operations.probe_steps import ProbeStep
from mlx_server.services.operations.setting_overrides import delete_override, read_override, write_override
from mlx_server.services.pipeline.embeddings import Embeddings, create_embeddings, input_list
from mlx_server.services.pipeline.engine.params import CompletionStats, GenerationParams, SamplingParams
from mlx_server.services.pipeline.events import (
    Finish,
    FinishReason,
    GenerationEvent,
    Notice,
    ReasoningDelta,
    Reply,
    TextDelta,
    ToolCallDelta,
    ToolCallDone,
    ToolCallRejected,
    ToolCallStarted,
    Usage,
)
from mlx_server.services.pipeline.inference import generate_chat_completion
from mlx_server.services.pipeline.protocols.openai_request import chat_tools
from mlx_server.services.pipeline.request import (
    GenerationRequest,
    ImagePart,
    Message,
    TextPart,
    Tool,
    ToolChoice,
)
from mlx_server.services.remote.backends import (
    BackendIn,
    RuleIn,
    delete_backend,
    delete_rule,
    list_backends,
    list_rules,
    remote_model_ids,
    save_backend,
    save_rule,
)
from mlx_server.services.remote.backends import is_routed as is_routed_model
from mlx_server.services.remote.backends import public as backend_view
from mlx_server.services.remote.backends import refresh_models as refresh_backend_models
from mlx_server.services.speech.synthesis import MAX_INPUT_CHARS as MAX_SPEECH_INPUT_CHARS
from mlx_server.services.speech.synthesis import SpeechStream, synthesize_speech
from mlx_server.services.transcription.audio_input import inspect_audio
from mlx_server.services.transcription.transcribe import (
    Transcript,
    TranscriptionOptions,
    check_request,
    transcribe_audio,
)
from mlx_server.utils.bounded import bounded, clip
from mlx_server.utils.sliding_window import SlidingWindow

__all__ = [
    "BENCHMARK_SIZES",
    "CONVERT_BITS",
    "CONVERT_GROUP_SIZES",
    "DEFAULT_HOME",
    "HELP_OPTIONS",
    "KV_BITS",
    "KV_GROUP_SIZES",
    "MAX_DEFAULT_MAX_TOKENS",
    "MAX_RETENTION_DAYS",
    "MAX_SPEECH_INPUT_CHARS",
    "APIError",
    "AdapterView",
    "ApiKey",
    "ApiKeyError",
    "ApiKeyScope",
    "AuditFilter",
    "AuditLog",
    "AuditState",
    "BackendIn",
    "BareHelpGroup",
    "BenchmarkFigures",
    "BenchmarkProgress",
    "CompletionStats",
    "ContainErrors",
    "ConversionPlan",
    "ConversionProgress",
    "DiskModel",
    "Embeddings",
    "EngineSample",
    "Finish",
    "FinishReason",
    "GGUFImportError",
    "GGUFInfo",
    "GGUFQuantization",
    "GenerationEvent",
    "GenerationParams",
    "GenerationRequest",
    "GuardPolicy",
    "HomeInUse",
    "ImagePart",
    "ImageRejected",
    "KeyState",
    "LoadedImage",
    "MLXServerSettings",
    "Message",
    "ModelCapabilities",
    "ModelDefaults",
    "ModelDefaultsError",
    "ModelNotFoundError",
    "ModelOptions",
    "ModelRecord",
    "ModelSource",
    "ModelStoreError",
    "ModelType",
    "NewApiKey",
    "Notice",
    "PageAccess",
    "PathAliases",
    "PoolLimits",
    "PoolState",
    "ProbeStep",
    "PullProgress",
    "ReasoningDelta",
    "Reply",
    "RequestGuard",
    "RuleIn",
    "SamplingParams",
    "ServingProcess",
    "SessionDep",
    "SettingsSlot",
    "SlidingWindow",
    "SpeechStream",
    "TextDelta",
    "TextPart",
    "Tool",
    "ToolCall",
    "ToolCallDelta",
    "ToolCallDone",
    "ToolCallRejected",
    "ToolCallStarted",
    "ToolChoice",
    "Transcript",
    "TranscriptionOptions",
    "Usage",
    "WhisperImportError",
    "__version__",
    "adapter_views",
    "add_model",
    "add_model_from_disk",
    "audit_retention",
    "audit_service",
    "backend_view",
    "background_session",
    "bench_arguments",
    "benchmark_model",
    "bind_refusal",
    "bounded",
    "chat_tools",
    "check_benchmark",
    "check_request",
    "clip",
    "cluster_nodes",
    "configure_tracing",
    "convert_model",
    "count_audit_rows",
    "create_api_key",
    "create_embeddings",
    "create_server_app",
    "database_status",
    "decode_image_data",
    "default_max_tokens_setting",
    "default_whisper_dir",
    "delete_backend",
    "delete_model",
    "delete_override",
    "delete_rule",
    "detect_model_type",
    "distinct_values",
    "draft_candidates",
    "ended_rows",
    "engine_samples",
    "ensure_default_models",
    "expand_user",
    "generate_chat_completion",
    "get_model",
    "get_server_settings",
    "health_router",
    "import_gguf",
    "import_whisper",
    "input_list",
    "inspect_audio",
    "inspect_gguf",
    "inspect_path",
    "is_cross_site",
    "is_loopback",
    "is_probe_running",
    "is_routed_model",
    "iter_batches",
    "keeps_files",
    "key_state",
    "keys_exist",
    "latest_id",
    "limit_body",
    "list_api_keys",
    "list_backends",
    "list_models",
    "list_rules",
    "load_model",
    "lock_home",
    "memory_budget_bytes",
    "metrics_router",
    "model_defaults",
    "model_options",
    "node_report",
    "page_before",
    "parse_assignments",
    "plan_conversion",
    "pool_limits",
    "pool_state",
    "pool_status",
    "pool_summary",
    "probe_model",
    "publish",
    "read_chat_template",
    "read_override",
    "refresh_backend_models",
    "register_adapter",
    "remote_model_ids",
    "remove_adapter",
    "reset_pool_limits",
    "revoke_api_key",
    "rows_after",
    "save_backend",
    "save_rule",
    "server_services",
    "serving_process",
    "set_audit_retention",
    "set_default_max_tokens",
    "set_model_defaults",
    "set_model_options",
    "set_model_puller",
    "set_pinned",
    "set_pool_limits",
    "set_probe_starter",
    "sharded_service",
    "start_arrival_probe",
    "suggested_model_id",
    "synthesize_speech",
    "transcribe_audio",
    "unload_all",
    "unload_model",
    "update_model_defaults",
    "upgrade_database",
    "use_server_settings",
    "utcnow",
    "validate_model_id",
    "version_option",
    "write_override",
]
