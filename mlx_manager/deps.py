"""The routers' shared FastAPI dependencies, as Annotated types."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends
from sqlmodel import Session

from mlx_manager.config import ManagerSettings, get_manager_settings
from mlx_server.facade import get_session

SessionDep = Annotated[Session, Depends(get_session)]
ManagerSettingsDep = Annotated[ManagerSettings, Depends(get_manager_settings)]
