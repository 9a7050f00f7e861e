"""The dashboard login: required off loopback or when set, first password from this machine,
argon2 hashes, session cookie flags and expiry, logout, and the throttle on guessing."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient
from sqlmodel import Session

from mlx_manager.config import ManagerSettings
from mlx_manager.main import create_app
from mlx_manager.records import AdminAccount
from mlx_manager.services.admin_account import (
    LOGIN_ATTEMPTS,
    failed_logins,
    new_session_cookie,
    session_is_valid,
    set_password,
)
from mlx_server.database import get_engine, upgrade_database
from mlx_server.records import utcnow

PASSWORD = "correct horse battery"


@pytest.fixture(autouse=True)
def no_failures() -> Iterator[None]:
    failed_logins.clear()
    yield
    failed_logins.clear()


def _client(home: Path, address: str = "127.0.0.1", **settings: object) -> TestClient:
    upgrade_database()
    app = create_app(ManagerSettings(home=home, **settings))  # type: ignore[arg-type]
    return TestClient(app, client=(address, 50000), follow_redirects=False)


@pytest.fixture
def guarded(home: Path) -> Iterator[TestClient]:
    """Login required on loopback; the password is set; the CSRF cookie is held."""
    with _client(home, require_login=True) as client:
        with Session(get_engine()) as session:
            set_password(session, PASSWORD)
        client.get("/login")
        client.headers["X-CSRF-Token"] = client.cookies["mlx_csrf"]
        yield client


def _log_in(client: TestClient, password: str = PASSWORD, next_page: str = "/models") -> httpx.Response:
    return client.post("/login", data={"password": password, "next": next_page})


def test_pages_need_a_session_when_login_is_required(guarded: TestClient) -> None:
    page = guarded.get("/models?q=1")
    assert page.status_code == 303
    assert page.headers["location"] == "/login?next=/models%3Fq%3D1"
    htmx = guarded.get("/server/indicator", headers={"HX-Request": "true"})
    assert htmx.status_code == 401 and htmx.headers["hx-redirect"].startswith("/login?next=")
    assert guarded.post("/server/unload-all").status_code == 401
    assert guarded.get("/health").status_code == 200
    assert guarded.get("/static/app.css").status_code == 200
    assert guarded.get("/v1/models").status_code == 200  # /v1 has keys, not the login


def test_login_sets_a_signed_httponly_lax_cookie_with_an_expiry(guarded: TestClient) -> None:
    response = _log_in(guarded)
    assert response.status_code == 303 and response.headers["location"] == "/models"
    cookie = response.headers["set-cookie"].lower()
    assert cookie.startswith("mlx_session=")
    assert "httponly" in cookie and "samesite=lax" in cookie and "max-age=43200" in cookie
    page = guarded.get("/models")
    assert page.status_code == 200 and "Log out" in page.text


def test_a_forged_or_expired_session_is_refused(guarded: TestClient) -> None:
    with Session(get_engine()) as session:
        expired = new_session_cookie(session, 60, now=utcnow() - timedelta(hours=1))
        valid = new_session_cookie(session, 60)
    assert not session_is_valid(Session(get_engine()), expired)
    expiry, version, nonce, signature = valid.split(".")
    forged = f"{int(expiry) + 86400}.{version}.{nonce}.{signature}"
    old_version = f"{expiry}.{int(version) - 1}.{nonce}.{signature}"
    for value in (expired, forged, old_version, "garbage"):
        guarded.cookies.set("mlx_session", value)
        assert guarded.get("/models").status_code == 303


def test_logout_ends_the_session(guarded: TestClient) -> None:
    _log_in(guarded)
    response = guarded.post("/logout")
    assert response.status_code == 303 and response.headers["location"] == "/login"
    assert (
        'mlx_session=""' in response.headers["set-cookie"]
        or "max-age=0" in response.headers["set-cookie"].lower()
    )
    assert guarded.get("/models").status_code == 303


def test_a_cookie_kept_from_before_logout_opens_nothing(guarded: TestClient) -> None:
    """The attack: copy the session cookie, log out, put the copy back."""
    _log_in(guarded)
    captured = guarded.cookies["mlx_session"]
    assert guarded.get("/keys").status_code == 200
    assert guarded.post("/logout").status_code == 303
    guarded.cookies.set("mlx_session", captured)
    assert guarded.get("/keys").status_code == 303
    created = guarded.post("/keys", data={"name": "after-logout", "scope": "admin"})
    assert created.status_code == 401
    assert guarded.get("/v1/models").status_code == 200  # no key exists yet: nothing was created


def test_a_logout_without_a_valid_session_ends_no_other_session(guarded: TestClient) -> None:
    _log_in(guarded)
    session = guarded.cookies["mlx_session"]
    guarded.cookies.delete("mlx_session")
    assert guarded.post("/logout").status_code == 303  # anyone may send it; it ends nothing
    guarded.cookies.set("mlx_session", session)
    assert guarded.get("/keys").status_code == 200


def test_a_new_password_ends_every_session(guarded: TestClient) -> None:
    _log_in(guarded)
    assert guarded.get("/models").status_code == 200
    with Session(get_engine()) as session:
        set_password(session, "another long password")
    assert guarded.get("/models").status_code == 303


def test_wrong_passwords_are_throttled_per_address(guarded: TestClient) -> None:
    for _ in range(LOGIN_ATTEMPTS):
        assert _log_in(guarded, "wrong password!").status_code == 401
    throttled = _log_in(guarded)  # even the right password waits now
    assert throttled.status_code == 429
    assert 1 <= int(throttled.headers["retry-after"]) <= 300
    assert "Too many wrong passwords" in throttled.text
    assert guarded.get("/models").status_code == 303


def test_open_redirects_through_next_are_refused(guarded: TestClient) -> None:
    for target in ("//evil.example/", "https://evil.example/", "/\\evil.example"):
        assert _log_in(guarded, next_page=target).headers["location"] == "/"
        failed_logins.clear()


def test_first_visit_from_this_machine_sets_the_password(home: Path) -> None:
    with _client(home, require_login=True) as client:
        form = client.get("/login")
        assert "Set the admin password" in form.text
        client.headers["X-CSRF-Token"] = client.cookies["mlx_csrf"]
        short = client.post("/login/setup", data={"password": "short", "confirm": "short"})
        assert short.status_code == 400 and "at least 10 characters" in short.text
        done = client.post("/login/setup", data={"password": PASSWORD, "confirm": PASSWORD, "next": "/audit"})
        assert done.status_code == 303 and done.headers["location"] == "/audit"
        assert client.get("/audit").status_code == 200
    with Session(get_engine()) as session:
        account = session.get(AdminAccount, 1)
    assert account is not None and account.password_hash.startswith("$argon2id$")
    assert PASSWORD not in account.password_hash


def test_the_first_password_cannot_be_set_from_another_machine(home: Path) -> None:
    with _client(home, address="10.0.0.7", host="0.0.0.0") as client:
        page = client.get("/login")
        assert "mlx-manager admin set-password" in page.text and 'action="/login/setup"' not in page.text
        client.headers["X-CSRF-Token"] = client.cookies["mlx_csrf"]
        refused = client.post("/login/setup", data={"password": PASSWORD, "confirm": PASSWORD})
        assert refused.status_code == 403
    with Session(get_engine()) as session:
        assert session.get(AdminAccount, 1) is None


def test_login_is_required_off_loopback_and_optional_on_it(home: Path) -> None:
    assert ManagerSettings(host="0.0.0.0").login_required
    assert not ManagerSettings(host="127.0.0.1").login_required
    assert ManagerSettings(host="127.0.0.1", require_login=True).login_required
    with _client(home) as client:
        assert client.get("/models").status_code == 200
    with _client(home, host="0.0.0.0") as client:
        assert client.get("/models").status_code == 303


def test_ollama_clients_heartbeat_is_answered_without_a_session(guarded: TestClient) -> None:
    # The Ollama Go client's Heartbeat() is `HEAD /`; it must not be sent to the login page.
    assert guarded.head("/").status_code == 200
    assert guarded.get("/").status_code == 303  # the dashboard itself still needs the login
