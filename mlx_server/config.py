"""Server settings (environment prefix MLX_SERVER_)."""

from __future__ import annotations

import ipaddress
from collections.abc import Callable
from pathlib import Path
from typing import Any, Generic, TypeVar

from pydantic import AliasChoices, Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

DEFAULT_HOME = Path("~/.mlx-manager")


# The most drafted tokens a prompt-lookup step may verify (settings, requests, model defaults).
MAX_PROMPT_LOOKUP_TOKENS = 32


class MLXServerSettings(BaseSettings):
    # A `.env` file in the working directory is read too; the environment wins over it.
    model_config = SettingsConfigDict(
        env_prefix="MLX_SERVER_", env_file=".env", extra="ignore", populate_by_name=True
    )

    # The server shares the manager's home (database + models) unless told otherwise,
    # so a standalone `mlx-server` sees the models the dashboard manages.
    home: Path = Field(
        default=DEFAULT_HOME,
        validation_alias=AliasChoices("MLX_SERVER_HOME", "MLX_MANAGER_HOME"),
    )
    host: str = "127.0.0.1"
    port: int = 8000
    logfire_token: str | None = None

    # Model pool (blueprint §10.5). None: 75 % of the machine's memory (or of Metal's
    # recommended working set on Apple Silicon).
    max_memory_gb: float | None = Field(default=None, gt=0)
    max_models: int = Field(default=4, ge=1)
    # A model unused this long is unloaded unless pinned; 0 keeps models until evicted.
    idle_ttl_seconds: float = Field(default=1800, ge=0)
    # KV caches kept for reuse by requests sharing a prompt prefix: MiB for all loaded models'
    # caches together (0 keeps none). Their bytes count in the pool's budget; a load drops them
    # before models.
    prompt_cache_mb: int = Field(default=512, ge=0)
    # Prompt cache entries holding at least this many tokens (long system prompts, tool
    # definitions, conversations) are written under the home when they leave memory (evicted,
    # unloaded, the server stopped) and read back by a later request sharing their prefix
    # (models/prompt_cache_store.py); 0 writes nothing.
    prompt_cache_persist_min_tokens: int = Field(default=256, ge=0)
    # MiB of those files, all models together; the least recently used go first (0: none kept).
    prompt_cache_disk_mb: int = Field(default=4096, ge=0)
    # On a CPU device with a fast BLAS (utils/cpu_blas.py), text models whose float32 weights
    # take at most this many MiB are loaded dequantized: float32 products run ~100x faster than
    # MLX's CPU quantized kernel there. 0 keeps every model as stored. No effect on Metal.
    cpu_float_weights_max_mb: int = Field(default=4096, ge=0)
    # On a CPU device under Linux, a text model's weights are put on transparent huge pages after
    # loading (utils/huge_pages.py): fewer TLB misses while decoding reads them all.
    cpu_huge_pages: bool = True
    # Speculative decoding (a model with a draft model): tokens the draft proposes per step of
    # the target model (mlx-lm's speculative_generate_step default).
    num_draft_tokens: int = Field(default=2, ge=1, le=16)
    # Prompt lookup (services/pipeline/engine/prompt_lookup.py): a generation alone on its model
    # proposes up to this many tokens per step copied from its prompt and reply, checked in one
    # pass; 0 turns it off. A request's `prompt_lookup` or the model's default overrides it.
    prompt_lookup_tokens: int = Field(default=8, ge=0, le=MAX_PROMPT_LOOKUP_TOKENS)
    # A model with kv_bits set keeps its KV cache in full precision for this many tokens, then
    # quantizes it (mlx-lm's default: short contexts keep their precision; 0 quantizes at once).
    quantized_kv_start: int = Field(default=5000, ge=0)

    # Generation requests admitted at once (running + waiting for the MLX thread); the next
    # one gets 503 with Retry-After instead of an unbounded queue.
    max_pending_requests: int = Field(default=32, ge=1)
    # Continuous batching (services/pipeline/engine/batching.py): a text model decodes at most this many
    # generations in one batched step (the others wait their turn, within max_pending_requests);
    # per model id in model_batch_sizes, e.g. {"qwen3-8b": 4}.
    max_batch_size: int = Field(default=8, ge=1)
    model_batch_sizes: dict[str, int] = Field(default_factory=dict)
    # Prompts are prefilled in chunks of this many tokens, each step between two decode steps
    # of the running generations, so a long prompt does not freeze their output.
    prefill_chunk_tokens: int = Field(default=256, ge=16)
    # Names clients send mapped to local models, by glob pattern, first match wins: e.g.
    # {"claude-sonnet-*": "qwen3-8b", "claude-haiku-*": "qwen3-8b"} so a coding agent's main
    # and sub-agent calls land on one loaded model instead of swapping. An exact id wins.
    model_aliases: dict[str, str] = Field(default_factory=dict)
    # max_tokens when a request gives none.
    default_max_tokens: int = Field(default=512, ge=1)

    # Remote backends (services/remote): a backend's circuit opens after this many failures or
    # timeouts in a row; once open, one request probes it again after the cool-down.
    remote_breaker_failures: int = Field(default=3, ge=1)
    remote_breaker_cooldown_seconds: float = Field(default=30, gt=0)
    # A backend URL whose host is or resolves to a link-local address (169.254.0.0/16, fe80::/10,
    # the cloud metadata address) is refused unless its network is listed here, e.g.
    # ["169.254.0.0/16"] for Macs linked by a Thunderbolt bridge.
    remote_allowed_networks: list[str] = Field(default_factory=list)

    # GET /metrics without an admin API key or a dashboard login (api/metrics.py).
    metrics_public: bool = False
    # The Server page's charts: the engine's figures are sampled this often and kept for an hour
    # in memory (services/operations/engine_samples.py).
    engine_sample_seconds: float = Field(default=2.0, ge=0.2, le=60)

    # Audit rows older than this are pruned by a scheduled job; 0 keeps them forever.
    audit_retention_days: int = Field(default=30, ge=0)

    # DNS-rebinding protection: Host names requests may carry besides localhost, 127.0.0.1 and
    # [::1] (any port), e.g. ["mybox.lan"] when clients reach the server by that name; "*" is any.
    allowed_hosts: list[str] = Field(default_factory=list)
    # Browser origins (e.g. "https://app.example") allowed to call /v1 cross-site; none by default.
    cors_origins: list[str] = Field(default_factory=list)
    # Reverse proxies (addresses or networks, e.g. ["127.0.0.1"] behind a local nginx) whose
    # X-Forwarded-For / X-Forwarded-Proto name the client; none by default, so the client is
    # the peer of the connection (the login throttle counts per client).
    trusted_proxies: list[str] = Field(default_factory=list)
    # Request bodies: JSON (and forms) at most this many bytes, uploads (multipart) their own limit.
    max_body_bytes: int = Field(default=8 * 1024 * 1024, ge=1024)
    max_upload_bytes: int = Field(default=100 * 1024 * 1024, ge=1024)
    # Speech to text: an upload lasting longer is refused from its header, and decoding stops
    # there if the header said less (a 400 either way). Two hours by default.
    max_audio_seconds: float = Field(default=7200, gt=0)
    # Time limits (blueprint §13.2): a /v1 request running longer is stopped (504, or an error
    # event if streaming). Per endpoint by glob, first match wins, e.g.
    # {"POST /v1/embeddings": 60, "POST /v1/admin/models/*/load": 1800}; 0 is no limit.
    timeout_seconds: float = Field(default=600, ge=0)
    endpoint_timeouts: dict[str, float] = Field(default_factory=dict)

    # Sharded models (mlx_server/distributed): how long the server waits for its group's answer
    # to one forward pass before the model is "degraded" (MLX's ring backend has no timeout of its
    # own), and for every rank to load its shard at a start or restart.
    distributed_timeout_s: float = Field(default=30, gt=0)
    distributed_start_timeout_s: float = Field(default=300, gt=0)

    # Images in chat requests (services/images). A URL is fetched only if every address its host
    # (and each redirect's) resolves to is public: loopback, private, link-local (the cloud
    # metadata address 169.254.169.254), multicast and unspecified ones are refused unless
    # allowed here, wholesale or by network (e.g. ["10.1.2.0/24"] for an intranet image host).
    image_fetch_allow_private_addresses: bool = False
    image_fetch_allowed_networks: list[str] = Field(default_factory=list)
    # An image (fetched or data: URL) larger than this is refused; a fetch stops reading there.
    image_max_bytes: int = Field(default=20 * 1024 * 1024, ge=1024)
    # Width x height above this is refused from the header, before decoding (decompression bombs).
    image_max_pixels: int = Field(default=50_000_000, ge=1)
    image_fetch_connect_timeout_seconds: float = Field(default=5, gt=0)
    image_fetch_read_timeout_seconds: float = Field(default=15, gt=0)
    # The whole fetch, redirects included: a body trickling in under the read timeout ends here.
    image_fetch_total_timeout_seconds: float = Field(default=30, gt=0)

    @field_validator("trusted_proxies")
    @classmethod
    def _proxy_addresses(cls, proxies: list[str]) -> list[str]:
        for proxy in proxies:
            try:
                ipaddress.ip_network(proxy.strip(), strict=False)
            except ValueError:
                example = "e.g. 10.0.0.5 or 10.0.0.0/24"
                raise ValueError(f"{proxy!r} is not an IP address or network ({example})") from None
        return [proxy.strip() for proxy in proxies]

    def proxy_header_options(self) -> dict[str, Any]:
        """uvicorn's options for forwarded headers. uvicorn's own default believes them from
        127.0.0.1, where any local process (or a proxy passing them through) could claim to be
        any client; here only the listed proxies are believed, and none by default."""
        return {"proxy_headers": bool(self.trusted_proxies), "forwarded_allow_ips": self.trusted_proxies}

    @property
    def home_dir(self) -> Path:
        return self.home.expanduser()

    @property
    def database_path(self) -> Path:
        return self.home_dir / "mlx-manager.db"

    @property
    def models_dir(self) -> Path:
        return self.home_dir / "models"


def is_loopback(host: str) -> bool:
    """localhost, 127.0.0.0/8 or ::1 (brackets allowed); a name or 0.0.0.0 is not."""
    if host.strip().lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip().strip("[]")).is_loopback
    except ValueError:
        return False


S = TypeVar("S", bound=BaseSettings)


class SettingsSlot(Generic[S]):
    """One settings object: read from the environment on first use (and kept), unless one was
    pinned with `use`; `reset` forgets both."""

    def __init__(self, read: Callable[[], S]) -> None:
        self._read = read
        self._pinned: S | None = None
        self._read_once: S | None = None

    def get(self) -> S:
        if self._pinned is not None:
            return self._pinned
        if self._read_once is None:
            self._read_once = self._read()
        return self._read_once

    def use(self, settings: S) -> None:
        self._pinned = settings

    def reset(self) -> None:
        self._pinned = self._read_once = None


_settings = SettingsSlot(MLXServerSettings)
get_settings = _settings.get
# Pin the settings object, e.g. the manager pointing the embedded server at its home.
use_settings = _settings.use
reset_settings = _settings.reset
