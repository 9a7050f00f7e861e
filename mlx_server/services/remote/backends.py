"""Remote backends and routing rules: create, change, delete, list, refresh a backend's models.

A backend's API key is stored and used, never returned: `public()` shows only whether one is
set. Remote models are named `{backend}/{model}` in /v1/models and in requests.
"""

from __future__ import annotations

from datetime import datetime
from fnmatch import fnmatchcase
from typing import Any
from urllib.parse import urlsplit

import httpx
from pydantic import BaseModel, Field, field_validator
from sqlmodel import Session, col, select

from mlx_server.config import get_settings
from mlx_server.database import background_session
from mlx_server.errors import APIError
from mlx_server.records import BackendKind, RemoteBackend, RoutingRule, utcnow
from mlx_server.schemas.limits import HeaderToken, TextOnly
from mlx_server.services.remote.breaker import breaker, forget_breaker
from mlx_server.utils.addresses import (
    AddressRefused,
    AddressRule,
    Resolver,
    checked_addresses,
    parse_networks,
    resolve_host,
)

NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"


class BackendIn(TextOnly):
    """A backend as the admin API and the Backends page give it; an absent api_key keeps the
    stored one, an empty one clears it."""

    name: str = Field(pattern=NAME_PATTERN, description="Letters, digits, '_', '.', '-'")
    kind: BackendKind
    base_url: str = Field(max_length=512)
    api_key: HeaderToken | None = Field(default=None, max_length=512)
    connect_timeout_s: float = Field(default=5.0, gt=0, le=600)
    read_timeout_s: float = Field(default=120.0, gt=0, le=3600)

    @field_validator("base_url")
    @classmethod
    def _http_url(cls, url: str) -> str:
        parts = urlsplit(url.strip())
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ValueError("base_url must be an http(s) URL, e.g. http://127.0.0.1:8001/v1")
        return url.strip().rstrip("/")


class Target(BaseModel):
    """One target of a rule: a local model (backend None) or a backend's model id."""

    backend: str | None = None
    model: str = Field(min_length=1, max_length=255)


class RuleIn(TextOnly):
    pattern: str = Field(min_length=1, max_length=255, description="A model id or glob, e.g. 'gpt-*'")
    targets: list[Target] = Field(min_length=1)
    # Rules are tried in ascending position; bounded so it fits SQLite's 64-bit INTEGER.
    position: int = Field(default=0, ge=-1_000_000, le=1_000_000)


def public(backend: RemoteBackend) -> dict[str, Any]:
    """What the admin API and the page show of a backend: no key, its breaker's state."""
    shown = backend.model_dump(exclude={"api_key"})
    shown["api_key_set"] = bool(backend.api_key)
    shown["breaker"] = breaker(backend.name).status()
    return shown


def list_backends(session: Session) -> list[RemoteBackend]:
    return list(session.exec(select(RemoteBackend).order_by(col(RemoteBackend.name))))


def get_backend(session: Session, name: str) -> RemoteBackend:
    backend = session.exec(select(RemoteBackend).where(RemoteBackend.name == name)).first()
    if backend is None:
        raise APIError(404, f"No remote backend is named {name!r}; GET /v1/admin/backends lists them.")
    return backend


async def check_address(base_url: str, resolver: Resolver = resolve_host) -> None:
    """Refuse a backend URL whose host is, or resolves to, a link-local address (169.254.0.0/16,
    fe80::/10, the cloud metadata address; IPv4-mapped forms included) unless
    MLX_SERVER_REMOTE_ALLOWED_NETWORKS lists its network: a server on this machine or the LAN
    is what backends are for, the metadata service of the cloud machine it runs on is not."""
    parts = urlsplit(base_url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    rule = AddressRule(parse_networks(get_settings().remote_allowed_networks), allow_private=True)
    try:
        await checked_addresses(parts.hostname or "", port, rule, resolver)
    except AddressRefused as refused:
        raise APIError(
            400,
            f"The backend URL's {refused}; remote backends may not be link-local (cloud metadata "
            "services live there) unless MLX_SERVER_REMOTE_ALLOWED_NETWORKS lists the network.",
            param="base_url",
        ) from None


async def save_backend(session: Session, given: BackendIn) -> RemoteBackend:
    """Create the backend, or change the one of that name (its URL checked: `check_address`)."""
    await check_address(given.base_url)
    backend = session.exec(select(RemoteBackend).where(RemoteBackend.name == given.name)).first()
    values = given.model_dump(exclude_unset=True, exclude={"api_key"})
    if backend is None:
        backend = RemoteBackend(**given.model_dump(exclude={"api_key"}), api_key=given.api_key or None)
    else:
        for key, value in values.items():
            setattr(backend, key, value)
        if "api_key" in given.model_fields_set:
            backend.api_key = given.api_key or None
        forget_breaker(backend.name)  # a changed URL or key starts afresh
    session.add(backend)
    session.commit()
    session.refresh(backend)
    return backend


def delete_backend(session: Session, name: str) -> None:
    session.delete(get_backend(session, name))
    session.commit()
    forget_breaker(name)


def auth_headers(backend: RemoteBackend) -> dict[str, str]:
    if backend.kind == BackendKind.ANTHROPIC:
        headers = {"anthropic-version": "2023-06-01"}
        return headers | ({"x-api-key": backend.api_key} if backend.api_key else {})
    return {"Authorization": f"Bearer {backend.api_key}"} if backend.api_key else {}


def timeouts(backend: RemoteBackend) -> httpx.Timeout:
    return httpx.Timeout(backend.read_timeout_s, connect=backend.connect_timeout_s)


def models_url(backend: RemoteBackend) -> str:
    suffix = "/v1/models" if backend.kind == BackendKind.ANTHROPIC else "/models"
    return backend.base_url + suffix


async def refresh_models(session: Session, name: str) -> RemoteBackend:
    """Ask the backend which models it serves (its /models) and store the ids; a backend that
    cannot be reached is a 502 saying why, and counts as a failure for its breaker."""
    backend = get_backend(session, name)
    await check_address(backend.base_url)  # its name may resolve elsewhere by now
    try:
        async with httpx.AsyncClient(timeout=timeouts(backend)) as client:
            response = await client.get(models_url(backend), headers=auth_headers(backend))
        response.raise_for_status()
        data = response.json().get("data")
        ids = [str(model["id"]) for model in data]
    except (httpx.HTTPError, ValueError, TypeError, KeyError, AttributeError) as exc:
        message = f"{type(exc).__name__}: {exc}"
        breaker(name).failed(message)
        raise APIError(
            502, f"Backend {name!r} did not list its models at {models_url(backend)}: {message}"
        ) from None
    breaker(name).succeeded()
    backend.models, backend.models_refreshed_at = ids, utcnow()
    session.add(backend)
    session.commit()
    session.refresh(backend)
    return backend


def remote_model_ids(session: Session) -> list[tuple[str, datetime]]:
    """Every remote model as requests name it (`backend/model`), with its backend's creation time."""
    return [(f"{b.name}/{m}", b.created_at) for b in list_backends(session) for m in b.models]


def list_rules(session: Session) -> list[RoutingRule]:
    return list(session.exec(select(RoutingRule).order_by(col(RoutingRule.position), col(RoutingRule.id))))


def save_rule(session: Session, given: RuleIn) -> RoutingRule:
    """Create the rule, or replace the targets of the rule with that pattern."""
    known = {b.name for b in list_backends(session)}
    unknown = sorted({t.backend for t in given.targets if t.backend is not None} - known)
    if unknown:
        raise APIError(400, f"Unknown backends {unknown}; add them first (known: {sorted(known)}).")
    rule = session.exec(select(RoutingRule).where(RoutingRule.pattern == given.pattern)).first()
    rule = rule or RoutingRule(pattern=given.pattern)
    rule.targets = [t.model_dump() for t in given.targets]
    rule.position = given.position
    session.add(rule)
    session.commit()
    session.refresh(rule)
    return rule


def delete_rule(session: Session, rule_id: int) -> None:
    rule = session.get(RoutingRule, rule_id)
    if rule is None:
        raise APIError(404, f"No routing rule has id {rule_id}; GET /v1/admin/routing-rules lists them.")
    session.delete(rule)
    session.commit()


def route_targets(session: Session, model_id: str) -> list[Target] | None:
    """Where a request for `model_id` goes: the targets of the first matching rule, else the
    backend its `backend/` prefix names; None for the local path (no rule, no backend)."""
    for rule in list_rules(session):
        if fnmatchcase(model_id, rule.pattern):
            return [Target.model_validate(t) for t in rule.targets]
    name, _, model = model_id.partition("/")
    if model and session.exec(select(RemoteBackend.id).where(RemoteBackend.name == name)).first():
        return [Target(backend=name, model=model)]
    return None


def is_routed(model_id: str) -> bool:
    """Whether a rule or a backend decides where requests for `model_id` go."""
    with background_session() as session:
        return route_targets(session, model_id) is not None
