"""Manager settings (environment prefix MLX_MANAGER_)."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from mlx_server.facade import DEFAULT_HOME, MLXServerSettings, SettingsSlot, is_loopback


class ManagerSettings(BaseSettings):
    # A `.env` file in the working directory is read too; the environment wins over it.
    model_config = SettingsConfigDict(env_prefix="MLX_MANAGER_", env_file=".env", extra="ignore")

    home: Path = DEFAULT_HOME  # the database file and imported models live here
    host: str = "127.0.0.1"
    port: int = 8080
    import_default_model: bool = True
    logfire_token: str | None = None
    # The dashboard asks for the admin password even on loopback (it always does on another bind).
    require_login: bool = False
    # How long a dashboard login lasts.
    session_hours: float = Field(default=12, gt=0)
    # How long the dashboard waits for an MCP server to start and list its tools, or to answer
    # one tool call (services/mcp_tools.py).
    mcp_timeout_seconds: float = Field(default=15, gt=0)

    def server_settings(self) -> MLXServerSettings:
        """Settings for the embedded server: the environment's, on the manager's home and bind
        address (which decides whether /v1 needs a key)."""
        return MLXServerSettings(home=self.home, host=self.host)

    @property
    def binds_loopback_only(self) -> bool:
        """Whether only this machine can reach the dashboard and the API."""
        return is_loopback(self.host)

    @property
    def login_required(self) -> bool:
        """The dashboard asks for the admin password: always off loopback, else if set to."""
        return self.require_login or not self.binds_loopback_only


_settings = SettingsSlot(ManagerSettings)
get_manager_settings = _settings.get
# Pin the settings object, e.g. `serve --host` over MLX_MANAGER_HOST.
use_manager_settings = _settings.use
reset_manager_settings = _settings.reset
