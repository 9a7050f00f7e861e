"""The routers' shared FastAPI dependencies, as Annotated types."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, Path, Request
from sqlmodel import Session

from mlx_manager.config import ManagerSettings, get_manager_settings
from mlx_server.facade import SessionDep as SessionDep  # the one request session (mlx_server/database.py)

ManagerSettingsDep = Annotated[ManagerSettings, Depends(get_manager_settings)]
# SQLite integers are signed 64-bit: a larger id names no row (and would overflow the driver).
SQLITE_MAX_INT = 2**63 - 1
RowId = Annotated[int, Path(ge=0, le=SQLITE_MAX_INT)]


@dataclass(frozen=True)
class Page:
    """What a page's routes work with: the request, a session and the manager's settings."""

    request: Request
    session: Session
    settings: ManagerSettings


def _page(request: Request, session: SessionDep, settings: ManagerSettingsDep) -> Page:
    return Page(request, session, settings)


PageDep = Annotated[Page, Depends(_page)]
