"""API keys for /v1: create (the key is shown once), list, revoke, and find a sent key.

Only a key's SHA-256 is stored: keys are 256 random bits, so a fast hash is as safe as a slow
one and lets every request be checked with one indexed lookup. Policy (issue 18): a server bound
to loopback with no key ever created stays open; once a key exists (revoked ones count, so
revoking the last key does not reopen the API), or when the bind is not loopback, every /v1
request needs a valid key.
"""

from __future__ import annotations

import hashlib
import re
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum

from sqlalchemy.exc import IntegrityError
from sqlmodel import Session, col, func, select

from mlx_server.config import is_loopback
from mlx_server.records import ApiKey, ApiKeyScope, utcnow

KEY_PREFIX = "mlx-"
SHOWN_PREFIX_CHARS = 12  # "mlx-" and 8 random characters: enough to tell keys apart
NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9 ._-]{0,63}")
CREATE_KEY_HINT = (
    "Create an API key on the dashboard's Keys page or with `mlx-manager keys create NAME`, "
    "then send it as `Authorization: Bearer <key>` (OpenAI) or `x-api-key: <key>` (Anthropic)."
)


class ApiKeyError(ValueError):
    """A key that cannot be created or revoked; the message says why."""


class KeyState(StrEnum):
    ACTIVE = "active"
    EXPIRED = "expired"
    REVOKED = "revoked"


@dataclass(frozen=True)
class NewApiKey:
    """A key just created: `secret` exists only here and is never stored."""

    record: ApiKey
    secret: str


def hash_key(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def key_state(key: ApiKey, now: datetime | None = None) -> KeyState:
    if key.revoked_at is not None:
        return KeyState.REVOKED
    if key.expires_at is not None and key.expires_at <= (now or utcnow()):
        return KeyState.EXPIRED
    return KeyState.ACTIVE


def _positive(value: int | None, what: str) -> int | None:
    if value is not None and value < 1:
        raise ApiKeyError(f"{what} must be at least 1 (leave it empty for no limit).")
    return value


def create_api_key(
    session: Session,
    *,
    name: str,
    scope: ApiKeyScope = ApiKeyScope.INFERENCE,
    expires_in_days: float | None = None,
    requests_per_minute: int | None = None,
    tokens_per_day: int | None = None,
) -> NewApiKey:
    """Store a new key's hash and return the key (the only time it can be read)."""
    name = name.strip()
    if not NAME_PATTERN.fullmatch(name):
        raise ApiKeyError(
            "A key name is 1 to 64 letters, digits, spaces, dots, dashes or underscores, "
            "starting with a letter or digit."
        )
    if expires_in_days is not None and expires_in_days <= 0:
        raise ApiKeyError("Expiry must be a positive number of days (leave it empty for none).")
    secret = KEY_PREFIX + secrets.token_urlsafe(32)
    record = ApiKey(
        name=name,
        prefix=secret[:SHOWN_PREFIX_CHARS],
        key_hash=hash_key(secret),
        scope=ApiKeyScope(scope),
        expires_at=utcnow() + timedelta(days=expires_in_days) if expires_in_days else None,
        requests_per_minute=_positive(requests_per_minute, "Requests per minute"),
        tokens_per_day=_positive(tokens_per_day, "Tokens per day"),
    )
    session.add(record)
    try:
        session.commit()
    except IntegrityError as exc:
        session.rollback()
        raise ApiKeyError(f"A key named {name!r} exists already: choose another name.") from exc
    session.refresh(record)
    return NewApiKey(record=record, secret=secret)


def list_api_keys(session: Session) -> list[ApiKey]:
    """Every key, newest first, revoked and expired ones included."""
    return list(session.exec(select(ApiKey).order_by(col(ApiKey.id).desc())))


def revoke_api_key(session: Session, name: str) -> ApiKey:
    """Revoke the key named `name` from now on (revoking a revoked key keeps its first date)."""
    key = session.exec(select(ApiKey).where(ApiKey.name == name.strip())).first()
    if key is None:
        raise ApiKeyError(f"No key is named {name!r}; `mlx-manager keys list` shows the names.")
    if key.revoked_at is None:
        key.revoked_at = utcnow()
        session.add(key)
        session.commit()
        session.refresh(key)
    return key


def find_api_key(session: Session, secret: str) -> ApiKey | None:
    """The key whose hash matches what a client sent, whatever its state."""
    return session.exec(select(ApiKey).where(ApiKey.key_hash == hash_key(secret))).first()


def keys_exist(session: Session) -> bool:
    return bool(session.exec(select(func.count()).select_from(ApiKey)).one())


def keys_required(session: Session, host: str) -> bool:
    """Whether /v1 requests need a valid key, by the policy in this module's docstring."""
    return not is_loopback(host) or keys_exist(session)


def bind_refusal(host: str, *, has_key: bool, has_password: bool) -> str | None:
    """Why serving on `host` must not start, or None: off loopback, with neither a key for the
    API nor a password for the dashboard, nothing would stop whoever reaches the port."""
    if is_loopback(host) or has_key or has_password:
        return None
    return (
        f"Refusing to listen on {host}: that address is reachable from other machines and "
        "neither an API key nor a dashboard password exists. Create a key with "
        "`mlx-manager keys create NAME --scope admin` and/or set the dashboard password with "
        "`mlx-manager admin set-password` (same MLX_MANAGER_HOME), or bind to 127.0.0.1."
    )
