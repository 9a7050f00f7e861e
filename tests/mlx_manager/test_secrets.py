"""Secrets never leave: a session with known secret values (hub token, an API key, the admin
password, a wrong key and a wrong password tried), then every page, log record, audit row,
export and error message is searched for them."""

from __future__ import annotations

import logging

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import text
from sqlmodel import Session

from mlx_manager.services.admin_account import admin_account, set_password
from mlx_manager.services.conversations import add_message, create_conversation
from mlx_server.database import get_engine
from mlx_server.services.operations.api_keys import create_api_key
from tests.mlx_manager.test_attacks import app_routes

HUB_TOKEN = "hf_KnownHubTokenForTheLeakTest0123456789"
WRONG_KEY = "mlx-WrongKeyForTheLeakTest0123456789abcdef"
PASSWORD = "KnownAdminPasswordForTheLeakTest"
WRONG_PASSWORD = "WrongAdminPasswordForTheLeakTest"
PROMPT_MARKER = "PROMPT-MARKER-7d41"


def _session_with_secrets(page: TestClient) -> tuple[list[str], list[str]]:
    """Use the app as a user would, with the secrets in play: the secrets made on the way (API
    key, session-signing secret) and every response body seen."""
    with Session(get_engine()) as session:
        api_key = create_api_key(session, name="leak-test").secret
        set_password(session, PASSWORD)
        signing = admin_account(session).session_secret  # type: ignore[union-attr]
        conversation = create_conversation(session, model_id="smol")
        add_message(session, conversation, role="user", content="hello")
    bodies = [page.post("/login", data={"password": WRONG_PASSWORD}).text]
    assert page.post("/login", data={"password": PASSWORD}).status_code in (200, 303)
    saved = page.post("/settings/hub", data={"endpoint": "http://127.0.0.1:9", "token": HUB_TOKEN})
    bodies.append(saved.text)
    bodies.append(page.get("/hub/search", params={"q": "smol"}).text)  # fails: the endpoint is closed
    bearer = {"authorization": f"Bearer {api_key}"}
    chat = {"model": "smol", "messages": [{"role": "user", "content": PROMPT_MARKER}], "max_tokens": 2}
    answered = page.post("/v1/chat/completions", json=chat, headers=bearer)
    assert answered.status_code == 200, answered.text
    bodies += [
        page.post("/v1/chat/completions", json={**chat, "model": "nope"}, headers=bearer).text,
        page.get("/v1/models", headers={"authorization": f"Bearer {WRONG_KEY}"}).text,
        page.post("/v1/messages", json={"model": "smol"}, headers={"x-api-key": WRONG_KEY}).text,
        page.get("/v1/admin/audit", headers=bearer).text,
    ]
    return [api_key, signing], bodies


def _everything_shown(page: TestClient) -> list[str]:
    """Every dashboard page without parameters, each audit row's page, the exports."""
    shown = [
        page.get(path).text
        for method, path in app_routes(page.app.routes)
        if method == "GET" and "{" not in path and not path.endswith("events") and not path.startswith("/v1")
    ]
    with get_engine().connect() as connection:
        ids = [row[0] for row in connection.execute(text("SELECT id FROM audit_log"))]
    shown += [page.get(f"/audit/{audit_id}").text for audit_id in ids]
    shown += [page.get(f"/audit/export.{kind}").text for kind in ("csv", "jsonl")]
    shown += [page.get(f"/chat/1/export.{kind}").text for kind in ("json", "md")]
    return shown


def _audit_rows() -> list[str]:
    with get_engine().connect() as connection:
        return [repr(row) for row in connection.execute(text("SELECT * FROM audit_log"))]


def test_secrets_appear_in_no_page_log_audit_row_export_or_error_and_prompts_only_at_debug(
    page: TestClient, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    (api_key, signing), bodies = _session_with_secrets(page)
    shown = _everything_shown(page)
    assert len(shown) > 10 and any("leak-test" in row for row in _audit_rows())
    places: dict[str, list[str]] = {
        "responses": bodies,
        "pages and exports": shown,
        "audit rows": _audit_rows(),
        "logs": [record.getMessage() for record in caplog.records],
    }
    secrets = (HUB_TOKEN, api_key, WRONG_KEY, PASSWORD, WRONG_PASSWORD, signing, api_key[12:], HUB_TOKEN[8:])
    for secret in secrets:
        leaks = {where: [t[:200] for t in texts if secret in t] for where, texts in places.items()}
        assert not any(leaks.values()), leaks
    # The session's prompt was logged (so this can fail), and only at DEBUG.
    levels = {record.levelname for record in caplog.records if PROMPT_MARKER in record.getMessage()}
    assert levels == {"DEBUG"}
