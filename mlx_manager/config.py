"""Manager settings (environment prefix MLX_MANAGER_)."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from pydantic_settings import BaseSettings, SettingsConfigDict

from mlx_server.config import DEFAULT_HOME, MLXServerSettings


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


@lru_cache
def get_manager_settings() -> ManagerSettings:
    return ManagerSettings()


def reset_manager_settings() -> None:
    get_manager_settings.cache_clear()
