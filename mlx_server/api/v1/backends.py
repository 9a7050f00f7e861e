"""Admin endpoints for remote backends and routing rules (thin: parse, dispatch to services).

A backend's API key is accepted, stored and used, never returned (`api_key_set` says whether
one is stored); each backend shows its circuit breaker's state.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path

from mlx_server.database import SessionDep
from mlx_server.records import RoutingRule
from mlx_server.services.remote.backends import (
    BackendIn,
    RuleIn,
    delete_backend,
    delete_rule,
    get_backend,
    list_backends,
    list_rules,
    public,
    refresh_models,
    save_backend,
    save_rule,
)

router = APIRouter(prefix="/admin", tags=["admin"])


@router.get("/backends")
def backends(session: SessionDep) -> dict[str, Any]:
    return {"object": "list", "data": [public(b) for b in list_backends(session)]}


@router.post("/backends")
async def put_backend(body: BackendIn, session: SessionDep, refresh: bool = True) -> dict[str, Any]:
    """Create or change a backend (by name); by default ask it for its models at once."""
    backend = await save_backend(session, body)
    if refresh:
        backend = await refresh_models(session, backend.name)
    return public(backend)


@router.get("/backends/{name}")
def backend(name: str, session: SessionDep) -> dict[str, Any]:
    return public(get_backend(session, name))


@router.post("/backends/{name}/refresh")
async def refresh(name: str, session: SessionDep) -> dict[str, Any]:
    """Ask the backend again which models it serves (its /models)."""
    return public(await refresh_models(session, name))


@router.delete("/backends/{name}")
def remove_backend(name: str, session: SessionDep) -> dict[str, Any]:
    delete_backend(session, name)
    return {"deleted": name}


@router.get("/routing-rules")
def rules(session: SessionDep) -> dict[str, Any]:
    return {"object": "list", "data": list_rules(session)}


@router.post("/routing-rules")
def put_rule(body: RuleIn, session: SessionDep) -> RoutingRule:
    """Create a rule, or replace the targets of the rule with that pattern."""
    return save_rule(session, body)


@router.delete("/routing-rules/{rule_id}")
def remove_rule(rule_id: Annotated[int, Path(ge=1, le=2**63 - 1)], session: SessionDep) -> dict[str, Any]:
    delete_rule(session, rule_id)
    return {"deleted": rule_id}
