"""Manager settings (environment prefix MLX_MANAGER_)."""

from __future__ import annotations

import ipaddress
from pathlib import Path

from pydantic_settings import BaseSettings, SettingsConfigDict

from mlx_server.facade import DEFAULT_HOME, MLXServerSettings, SettingsSlot


class ManagerSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="MLX_MANAGER_", extra="ignore")

    home: Path = DEFAULT_HOME  # the database file and imported models live here
    host: str = "127.0.0.1"
    port: int = 8080
    import_default_model: bool = True
    logfire_token: str | None = None

    def server_settings(self) -> MLXServerSettings:
        """Settings for the embedded server: the environment's, on the manager's home."""
        return MLXServerSettings(home=self.home)

    @property
    def binds_loopback_only(self) -> bool:
        """Whether only this machine can reach the dashboard and the API (neither has logins)."""
        return is_loopback(self.host)


def is_loopback(host: str) -> bool:
    """localhost, 127.0.0.0/8 or ::1 (brackets allowed); a name or 0.0.0.0 is not."""
    if host.strip().lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip().strip("[]")).is_loopback
    except ValueError:
        return False


_settings = SettingsSlot(ManagerSettings)
get_manager_settings = _settings.get
# Pin the settings object, e.g. `serve --host` over MLX_MANAGER_HOST.
use_manager_settings = _settings.use
reset_manager_settings = _settings.reset
