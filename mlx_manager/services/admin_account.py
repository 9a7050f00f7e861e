"""The dashboard's admin account: its password, login sessions, and the throttle on guessing.

The password is hashed with argon2id (argon2-cffi's defaults, RFC 9106's low-memory profile).
A session is a cookie `expiry.version.nonce.signature`, signed (HMAC-SHA256) with a secret kept
in the account's row and checked on every request against the row: setting a new password
replaces the secret and logging out raises the session version, either of which ends every
session at once, on the server (a cookie kept from before opens nothing).
"""

from __future__ import annotations

import hashlib
import hmac
import math
import secrets
from datetime import datetime

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError
from sqlmodel import Session

from mlx_manager.records import AdminAccount
from mlx_server.facade import SlidingWindow, utcnow

ACCOUNT_ID = 1
MIN_PASSWORD_CHARS = 10
SESSION_COOKIE = "mlx_session"

_hasher = PasswordHasher()


class PasswordRefused(ValueError):
    """A password that cannot be set; the message says what to change."""


def admin_account(session: Session) -> AdminAccount | None:
    return session.get(AdminAccount, ACCOUNT_ID)


def password_is_set(session: Session) -> bool:
    return admin_account(session) is not None


def set_password(session: Session, password: str) -> None:
    """Set (or replace) the admin password; every existing session ends."""
    if len(password) < MIN_PASSWORD_CHARS:
        raise PasswordRefused(f"The password must be at least {MIN_PASSWORD_CHARS} characters long.")
    account = admin_account(session) or AdminAccount(id=ACCOUNT_ID, password_hash="", session_secret="")
    account.password_hash = _hasher.hash(password)
    account.session_secret = secrets.token_urlsafe(32)
    account.session_version += 1
    account.updated_at = utcnow()
    session.add(account)
    session.commit()


def check_password(session: Session, password: str) -> bool:
    account = admin_account(session)
    if account is None:
        return False
    try:
        _hasher.verify(account.password_hash, password)
    except (VerificationError, InvalidHashError):
        return False
    if _hasher.check_needs_rehash(account.password_hash):  # argon2-cffi's parameters moved on
        account.password_hash = _hasher.hash(password)
        session.add(account)
        session.commit()
    return True


def _signature(secret: str, payload: str) -> str:
    return hmac.new(secret.encode(), payload.encode(), hashlib.sha256).hexdigest()


def new_session_cookie(session: Session, lifetime_s: float, now: datetime | None = None) -> str:
    """A signed session value valid for `lifetime_s` (the account must exist)."""
    account = admin_account(session)
    if account is None:
        raise PasswordRefused("Set the admin password first (`mlx-manager admin set-password`).")
    expiry = int((now or utcnow()).timestamp() + lifetime_s)
    payload = f"{expiry}.{account.session_version}.{secrets.token_urlsafe(12)}"
    return f"{payload}.{_signature(account.session_secret, payload)}"


def session_is_valid(session: Session, value: str | None, now: datetime | None = None) -> bool:
    """Whether a cookie value is an unexpired session of the current version, signed with the
    current secret."""
    if not value or value.count(".") != 3:
        return False
    account = admin_account(session)
    if account is None:
        return False
    payload, _, signature = value.rpartition(".")
    if not hmac.compare_digest(signature, _signature(account.session_secret, payload)):
        return False
    expiry, version, _nonce = payload.split(".")
    if version != str(account.session_version):
        return False
    return expiry.isdigit() and int(expiry) > (now or utcnow()).timestamp()


def end_sessions(session: Session) -> None:
    """Log out: every session cookie issued so far stops opening pages (all browsers)."""
    account = admin_account(session)
    if account is not None:
        account.session_version += 1
        session.add(account)
        session.commit()


# Failed logins per client address: at most LOGIN_ATTEMPTS in LOGIN_WINDOW_S, then a wait.
LOGIN_ATTEMPTS = 5
LOGIN_WINDOW_S = 300.0
failed_logins = SlidingWindow(LOGIN_WINDOW_S)


def login_wait_s(client: str) -> int | None:
    """Seconds this client must wait before trying another password, or None."""
    wait = failed_logins.wait_s(client, LOGIN_ATTEMPTS)
    return None if wait is None else max(1, math.ceil(wait))
