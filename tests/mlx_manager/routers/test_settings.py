"""The Settings page: each section saves, validates and applies live; the hub token never shows."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlmodel import Session

from mlx_manager.config import is_loopback, reset_manager_settings
from mlx_manager.services.admin_account import SESSION_COOKIE, new_session_cookie, set_password
from mlx_manager.services.settings_store import (
    AUTO_PROBE,
    CHAT_DEFAULTS,
    DEFAULT_CHAT_PARAMETERS,
    HUB_CACHE_DIR,
    HUB_ENDPOINT,
    HUB_TOKEN,
    get_chat_defaults,
    get_setting,
    mask_secret,
)
from mlx_server.config import get_settings as get_server_settings
from mlx_server.database import get_engine, upgrade_database
from mlx_server.models.pool import get_model_pool
from mlx_server.records import AuditLog, ModelRecord, ModelSource, SettingOverride, utcnow
from mlx_server.services.operations.audit import audit_retention
from mlx_server.services.operations.generation_defaults import DEFAULT_MAX_TOKENS_KEY, default_max_tokens
from mlx_server.services.operations.setting_overrides import cached_override, read_override, write_override
from mlx_server.utils.memory import GB
from tests.mlx_manager.audit_rows import add_audit_row
from tests.support import csrf_headers

HTMX = {"HX-Request": "true"}
SECRET = "hf_SuperSecretToken9876"
GENERATION = {"temperature": "0.2", "top_p": "0.9", "top_k": "40", "max_tokens": "256", "api_max_tokens": ""}


@pytest.fixture
def page(client: TestClient) -> TestClient:
    """The app with the CSRF header htmx would send on every request."""
    client.headers.update(csrf_headers(client))
    return client


def _override(key: str) -> object:
    with Session(get_engine()) as session:
        return read_override(session, key)


def _database_dump() -> list[str]:
    with sqlite3.connect(get_server_settings().database_path) as db:
        return list(db.iterdump())


def test_get_never_changes_state(page: TestClient) -> None:
    before = _database_dump()
    for url in ("/settings", "/settings?saved=hub", "/settings?saved=audit"):
        response = page.get(url)
        assert response.status_code == 200
    assert page.get("/settings", headers=HTMX).status_code == 200
    assert _database_dump() == before


def test_posts_without_the_csrf_token_are_refused(client: TestClient) -> None:
    for section in ("pool", "audit", "hub", "generation"):
        assert client.post(f"/settings/{section}", data={"reset": "1"}).status_code == 403
    assert _override("max_models") is None


def test_environment_section_shows_home_host_port_and_database(page: TestClient, home: Path) -> None:
    html = page.get("/settings").text
    for text in (
        *("MLX_MANAGER_HOME", str(home), "MLX_MANAGER_HOST", "127.0.0.1", "MLX_MANAGER_PORT", "8080"),
        *("MLX_MANAGER_REQUIRE_LOGIN", "<code>false</code>"),
    ):
        assert text in html
    assert str(home / "mlx-manager.db") in html


# --- Pool ---


def test_pool_limits_are_saved_and_applied_live(page: TestClient) -> None:
    form = {"max_memory_gb": "1.5", "max_models": "2", "idle_ttl_seconds": "90"}
    saved = page.post("/settings/pool", data=form, follow_redirects=False)
    assert saved.status_code == 303 and saved.headers["location"] == "/settings?saved=pool#pool"
    pool = get_model_pool()
    assert (pool.budget_bytes, pool.max_models, pool.idle_ttl_seconds) == (int(1.5 * GB), 2, 90.0)
    assert _override("max_models") == 2
    html = page.get("/settings?saved=pool").text
    assert 'name="max_memory_gb" min="0.1" step="any" value="1.5"' in html and "Saved." in html
    assert 'value="1.5"' in page.get("/server").text  # the Server page shows the same limits

    fragment = page.post("/settings/pool", data={**form, "max_models": "3"}, headers=HTMX)
    assert fragment.status_code == 200 and fragment.text.lstrip().startswith(
        '<section class="card settings-section" id="pool"'
    )
    assert "Pool limits saved and applied." in fragment.text and get_model_pool().max_models == 3

    reset = page.post("/settings/pool", data={"reset": "1"}, headers=HTMX)
    assert "the environment&#39;s again" in reset.text and _override("max_models") is None
    assert get_model_pool().max_models == get_server_settings().max_models


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("max_memory_gb", "abc", "Memory budget must be a number, not &#39;abc&#39;."),
        ("max_memory_gb", "0", "Memory budget must be between 0.1 and"),
        ("max_models", "0", "Max models must be between 1 and 64"),
        ("max_models", "2.5", "Max models must be a whole number"),
        ("idle_ttl_seconds", "-1", "Idle TTL must be 0 (never unload) or more seconds"),
        ("idle_ttl_seconds", "inf", "Idle unload must be a finite number"),
    ],
)
def test_pool_refuses_bad_limits_keeping_the_input(
    page: TestClient, field: str, value: str, message: str
) -> None:
    before = get_model_pool().max_models
    form = {"max_memory_gb": "1.5", "max_models": "2", "idle_ttl_seconds": "90", field: value}
    for headers in (HTMX, {}):  # the section for htmx, the whole page for a plain form
        response = page.post("/settings/pool", data=form, headers=headers)
        assert response.status_code == 400
        assert message in response.text and f'name="{field}"' in response.text
        assert f'value="{value}"' in response.text
    assert "<h1>Settings</h1>" in response.text
    assert get_model_pool().max_models == before and _override("max_models") is None


# --- Audit retention ---


def test_audit_retention_is_saved_and_prunes_at_once(page: TestClient) -> None:
    add_audit_row(request_id="old", endpoint="POST /v1/completions", created_at=utcnow() - timedelta(days=10))
    fragment = page.post("/settings/audit", data={"days": "7"}, headers=HTMX)
    assert fragment.status_code == 200 and 'action="/settings/audit"' in fragment.text
    assert 'data-testid="retention-days">7<' in fragment.text and "1 older request deleted" in fragment.text
    with Session(get_engine()) as session:
        assert audit_retention(session).days == 7 and session.get(AuditLog, 1) is None

    saved = page.post("/settings/audit", data={"days": "90"}, follow_redirects=False)
    assert saved.status_code == 303 and saved.headers["location"] == "/settings?saved=audit#audit"
    assert 'data-testid="retention-days">90<' in page.get("/audit").text  # the audit page agrees

    page.post("/settings/audit", data={"reset": "1"})
    with Session(get_engine()) as session:
        assert audit_retention(session).overridden is False


@pytest.mark.parametrize("days", ["0", "3651", "abc", "", "7.5"])
def test_audit_retention_refuses_bad_days(page: TestClient, days: str) -> None:
    response = page.post("/settings/audit", data={"days": days})
    assert response.status_code == 400 and "<h1>Settings</h1>" in response.text
    assert "Keep audit rows for a whole number of days from 1 to 3650" in response.text
    assert f'value="{days}"' in response.text
    assert _override("audit_retention_days") is None


# --- Hub ---


def test_hub_settings_are_saved_for_the_hub_code(page: TestClient, tmp_path: Path) -> None:
    form = {
        "endpoint": "http://127.0.0.1:9999",
        "cache_dir": str(tmp_path / "hf"),
        "token": "",
        "auto_probe": "",
    }
    saved = page.post("/settings/hub", data=form, follow_redirects=False)
    assert saved.status_code == 303 and saved.headers["location"] == "/settings?saved=hub#hub"
    with Session(get_engine()) as session:
        assert get_setting(session, HUB_ENDPOINT) == "http://127.0.0.1:9999"
        assert get_setting(session, HUB_CACHE_DIR) == str(tmp_path / "hf")
        assert get_setting(session, AUTO_PROBE) is False
    html = page.get("/settings").text
    assert 'value="http://127.0.0.1:9999"' in html and 'name="auto_probe" value="1" >' in html

    # Empty fields return to huggingface_hub's defaults; the box checked turns auto-probe on.
    page.post("/settings/hub", data={"endpoint": "", "cache_dir": "", "auto_probe": "1"})
    with Session(get_engine()) as session:
        assert read_override(session, HUB_ENDPOINT.key) is None and get_setting(session, AUTO_PROBE) is True
        assert get_setting(session, HUB_ENDPOINT) == HUB_ENDPOINT.default()


def test_hub_refuses_bad_values_and_stores_none_of_the_form(page: TestClient) -> None:
    form = {"endpoint": "ftp://hub", "cache_dir": "relative/dir", "token": "hf_new", "auto_probe": ""}
    response = page.post("/settings/hub", data=form, headers=HTMX)
    assert response.status_code == 400
    assert "The hub endpoint must be an http(s) URL" in response.text
    assert "The hub cache must be an absolute path" in response.text
    assert 'value="ftp://hub"' in response.text and 'value="relative/dir"' in response.text
    with Session(get_engine()) as session:
        assert get_setting(session, HUB_TOKEN) is None and get_setting(session, AUTO_PROBE) is True


def test_a_cache_dir_in_the_home_of_no_such_user_is_a_400_not_a_500(page: TestClient) -> None:
    # Found by schemathesis: Path("~name").expanduser() raises when no user has that name.
    response = page.post("/settings/hub", data={"cache_dir": "~no-such-user-31/hf"}, headers=HTMX)
    assert response.status_code == 400 and "The hub cache must be an absolute path" in response.text


def test_the_token_is_never_rendered_in_full(page: TestClient) -> None:
    saved = page.post("/settings/hub", data={"token": SECRET, "auto_probe": "1"}, headers=HTMX)
    refused = page.post("/settings/hub", data={"endpoint": "nope", "token": SECRET + "x"}, headers=HTMX)
    assert refused.status_code == 400
    for html in (saved.text, refused.text, page.get("/settings").text, page.get("/settings?saved=hub").text):
        assert SECRET not in html and SECRET[3:] not in html
        assert f'data-testid="hub-token">{mask_secret(SECRET)}<' in html  # "hf_…9876"
    with Session(get_engine()) as session:
        assert get_setting(session, HUB_TOKEN) == SECRET  # the refused form changed nothing


def test_an_empty_token_field_keeps_the_stored_token(page: TestClient) -> None:
    page.post("/settings/hub", data={"token": SECRET})
    page.post("/settings/hub", data={"token": "", "endpoint": "https://hub.example", "auto_probe": "1"})
    with Session(get_engine()) as session:
        assert get_setting(session, HUB_TOKEN) == SECRET
        assert get_setting(session, HUB_ENDPOINT) == "https://hub.example"


def test_clear_token_removes_it(page: TestClient) -> None:
    page.post("/settings/hub", data={"token": SECRET, "endpoint": "https://hub.example"})
    assert 'form="hub-clear-token"' in page.get("/settings").text
    cleared = page.post("/settings/hub", data={"clear_token": "1"}, headers=HTMX)
    assert cleared.status_code == 200 and "Hub token removed." in cleared.text
    assert 'data-testid="hub-token">not set<' in cleared.text and "hub-clear-token" not in cleared.text
    with Session(get_engine()) as session:
        assert get_setting(session, HUB_TOKEN) is None
        assert get_setting(session, HUB_ENDPOINT) == "https://hub.example"  # only the token went


# --- Generation defaults ---


def test_generation_defaults_are_saved_for_new_conversations(page: TestClient) -> None:
    with Session(get_engine()) as session:
        assert get_chat_defaults(session) == DEFAULT_CHAT_PARAMETERS
    saved = page.post("/settings/generation", data=GENERATION, follow_redirects=False)
    assert saved.status_code == 303 and saved.headers["location"] == "/settings?saved=generation#generation"
    with Session(get_engine()) as session:
        defaults = get_chat_defaults(session)
    assert defaults == {"temperature": 0.2, "top_p": 0.9, "top_k": 40, "max_tokens": 256}
    assert type(defaults["top_k"]) is int and type(defaults["temperature"]) is float
    html = page.get("/settings").text
    assert 'name="temperature" min="0" max="2" step="any" value="0.2"' in html
    assert _override(DEFAULT_MAX_TOKENS_KEY) is None  # left empty: the environment's

    reset = page.post("/settings/generation", data={"reset": "1"}, headers=HTMX)
    assert reset.status_code == 200 and _override(CHAT_DEFAULTS.key) is None


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("temperature", "2.5", "Temperature must be between 0 and 2"),
        ("temperature", "warm", "Temperature must be a number"),
        ("top_p", "0", "Top-p must be above 0 and at most 1"),
        ("top_k", "-1", "Top-k must be a whole number, 0 (off) or more"),
        ("max_tokens", "40000", "Max tokens must be a whole number from 1 to 32768"),
        ("api_max_tokens", "0", "The API&#39;s default max tokens must be a whole number from 1 to 32768"),
    ],
)
def test_generation_refuses_bad_values_keeping_the_input(
    page: TestClient, field: str, value: str, message: str
) -> None:
    response = page.post("/settings/generation", data={**GENERATION, "api_max_tokens": "64", field: value})
    assert response.status_code == 400 and message in response.text
    assert f'name="{field}"' in response.text and f'value="{value}"' in response.text
    assert _override(CHAT_DEFAULTS.key) is None and _override(DEFAULT_MAX_TOKENS_KEY) is None


def test_stored_chat_defaults_out_of_range_fall_back_to_the_defaults(page: TestClient) -> None:
    with Session(get_engine()) as session:
        write_override(
            session, CHAT_DEFAULTS.key, {"temperature": 9, "top_p": 1, "top_k": 0, "max_tokens": 5}
        )
        assert get_chat_defaults(session) == DEFAULT_CHAT_PARAMETERS


def test_cached_override_reads_the_database_once_until_written(page: TestClient) -> None:
    assert cached_override(DEFAULT_MAX_TOKENS_KEY) is None and default_max_tokens() == 512
    with Session(get_engine()) as session:  # a write the cache cannot see (as by another process)
        session.add(SettingOverride(key=DEFAULT_MAX_TOKENS_KEY, value="7"))
        session.commit()
    assert default_max_tokens() == 512  # cached for CACHE_SECONDS
    page.post("/settings/generation", data={**GENERATION, "api_max_tokens": "9"})  # a write here clears it
    assert default_max_tokens() == 9


@pytest.fixture
def smol_page(home: Path, smollm_dir: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[TestClient]:
    """The app with SmolLM2 registered as "smol" and an environment default of 5 tokens."""
    from mlx_manager.main import create_app

    monkeypatch.setenv("MLX_SERVER_DEFAULT_MAX_TOKENS", "5")
    upgrade_database()
    with Session(get_engine()) as session:
        session.add(ModelRecord(id="smol", source=ModelSource.LOCAL, path=str(smollm_dir)))
        session.commit()
    with TestClient(create_app()) as client:
        client.headers.update(csrf_headers(client))
        yield client


def test_api_requests_without_max_tokens_use_the_saved_default(smol_page: TestClient) -> None:
    def generated_tokens(endpoint: str, body: dict[str, Any]) -> int:
        answer = smol_page.post(f"/v1/{endpoint}", json={"model": "smol", "temperature": 0, **body}).json()
        assert answer["choices"][0]["finish_reason"] == "length"
        return int(answer["usage"]["completion_tokens"])

    chat = {"messages": [{"role": "user", "content": "What is the capital of France?"}]}
    # Legacy completions default to OpenAI's 16 when the field is absent; null asks for ours.
    completion = {"prompt": "The capital of France is", "max_tokens": None}
    assert generated_tokens("chat/completions", chat) == 5  # MLX_SERVER_DEFAULT_MAX_TOKENS
    saved = smol_page.post("/settings/generation", data={**GENERATION, "api_max_tokens": "3"}, headers=HTMX)
    assert saved.status_code == 200 and 'value="3"' in saved.text and 'placeholder="5"' in saved.text
    assert generated_tokens("chat/completions", chat) == 3
    assert generated_tokens("completions", completion) == 3
    smol_page.post("/settings/generation", data={**GENERATION, "api_max_tokens": ""})
    assert generated_tokens("completions", completion) == 5


# --- Bind warning ---


@pytest.fixture
def bound_to(home: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[str], str]]:
    """Open /settings on an app whose MLX_MANAGER_HOST is the given address."""
    from mlx_manager.main import create_app

    def settings_page(host: str) -> str:
        monkeypatch.setenv("MLX_MANAGER_HOST", host)
        reset_manager_settings()
        with TestClient(create_app()) as client, Session(get_engine()) as session:
            # Off loopback the dashboard needs a login.
            set_password(session, "a long enough password")
            client.cookies.set(SESSION_COOKIE, new_session_cookie(session, 60))
            return client.get("/settings").text

    yield settings_page


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "192.168.1.20"])
def test_bind_warning_when_not_on_loopback(bound_to: Callable[[str], str], host: str) -> None:
    html = bound_to(host)
    assert 'data-testid="bind-warning"' in html and "Other machines can reach this server" in html
    assert "the admin password and every <code>/v1</code> request needs an API key" in html
    assert f"<code>{host}</code>" in html


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost", "::1"])
def test_no_bind_warning_on_loopback(bound_to: Callable[[str], str], host: str) -> None:
    assert 'data-testid="bind-warning"' not in bound_to(host)


def test_loopback_addresses() -> None:
    assert all(map(is_loopback, ["127.0.0.1", "127.8.9.10", "::1", "[::1]", "localhost", "LOCALHOST"]))
    assert not any(map(is_loopback, ["0.0.0.0", "::", "10.0.0.2", "my-mac.local", ""]))
