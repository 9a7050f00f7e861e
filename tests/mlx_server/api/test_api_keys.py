"""API keys on /v1 through the real openai and anthropic SDKs, on the app in this process."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import anthropic
import openai
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import text
from sqlmodel import Session, select

from mlx_manager.config import ManagerSettings
from mlx_manager.main import create_app
from mlx_server.config import get_settings
from mlx_server.database import get_engine, upgrade_database
from mlx_server.main import create_app as create_server_app
from mlx_server.records import ApiKey, ApiKeyScope, AuditLog, utcnow
from mlx_server.services.operations.api_keys import NewApiKey, create_api_key, revoke_api_key
from mlx_server.services.operations.audit import audit_service
from mlx_server.services.operations.key_limits import request_windows
from tests.mlx_manager.audit_rows import add_audit_row


@pytest.fixture(autouse=True)
def fresh_windows() -> Iterator[None]:
    request_windows.clear()  # key ids start at 1 in every test's database
    yield
    request_windows.clear()


@pytest.fixture
def app_client(home: Path) -> Iterator[TestClient]:
    upgrade_database()
    with TestClient(create_app()) as client:
        yield client


def new_key(**options: object) -> NewApiKey:
    with Session(get_engine()) as session:
        return create_api_key(session, **{"name": "ci", **options})  # type: ignore[arg-type]


def oai(client: TestClient, key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url="http://testserver/v1", api_key=key, http_client=client, max_retries=0)


def list_models(client: TestClient, key: str) -> object:
    """GET /v1/models with the openai SDK; key "" sends no Authorization header at all."""
    unsent = {"Authorization": openai.Omit()} if not key else None
    return oai(client, key or "unsent").models.list(extra_headers=unsent).data


def ask_claude(client: TestClient, key: str) -> None:
    """POST /v1/messages with the anthropic SDK; key "" sends no x-api-key header at all."""
    unsent = {"x-api-key": anthropic.Omit()} if not key else None
    sdk = anthropic.Anthropic(
        base_url="http://testserver", api_key=key or "unsent", http_client=client, max_retries=0
    )
    sdk.messages.create(
        model="smol", max_tokens=4, messages=[{"role": "user", "content": "hi"}], extra_headers=unsent
    )


def test_loopback_without_keys_is_open_and_the_first_key_closes_it(app_client: TestClient) -> None:
    assert oai(app_client, "anything").models.list().data is not None
    new_key()
    with pytest.raises(openai.AuthenticationError):
        oai(app_client, "anything").models.list()


def _expired() -> str:
    key = new_key(expires_in_days=1)
    with Session(get_engine()) as session:
        row = session.get(ApiKey, key.record.id)
        assert row is not None
        row.expires_at = utcnow() - timedelta(seconds=1)
        session.add(row)
        session.commit()
    return key.secret


def _revoked() -> str:
    key = new_key()
    with Session(get_engine()) as session:
        revoke_api_key(session, "ci")
    return key.secret


def _wrong() -> str:
    new_key()
    return "mlx-not-a-key-that-exists"


def _missing() -> str:
    new_key()
    return ""


REFUSED = {"missing": _missing, "wrong": _wrong, "revoked": _revoked, "expired": _expired}


@pytest.mark.parametrize("case", REFUSED)
def test_refused_keys_get_401_in_openai_shape(app_client: TestClient, case: str) -> None:
    secret = REFUSED[case]()
    with pytest.raises(openai.AuthenticationError) as refused:
        list_models(app_client, secret)
    error = refused.value.response.json()["error"]
    assert error["type"] == "authentication_error"
    assert refused.value.response.headers["www-authenticate"] == "Bearer"
    if secret:
        assert secret not in refused.value.response.text


@pytest.mark.parametrize("case", REFUSED)
def test_refused_keys_get_401_in_anthropic_shape(app_client: TestClient, case: str) -> None:
    secret = REFUSED[case]()
    with pytest.raises(anthropic.AuthenticationError) as refused:
        ask_claude(app_client, secret)
    body = refused.value.response.json()
    assert body["type"] == "error"
    assert body["error"]["type"] == "authentication_error"


def test_a_valid_key_is_accepted_by_both_sdks_and_named_in_the_audit_row(app_client: TestClient) -> None:
    key = new_key()
    assert oai(app_client, key.secret).models.list().data is not None
    # No such model: the request passed the key check and reached the route (404, not 401).
    with pytest.raises(anthropic.NotFoundError):
        ask_claude(app_client, key.secret)
    assert audit_service.flush()
    with Session(get_engine()) as session:
        rows = session.exec(select(AuditLog).order_by(AuditLog.id)).all()  # type: ignore[arg-type]
    assert [(r.endpoint, r.status, r.key_name) for r in rows] == [
        ("GET /v1/models", 200, "ci"),
        ("POST /v1/messages", 404, "ci"),
    ]


def test_an_inference_key_on_an_admin_route_is_403(app_client: TestClient) -> None:
    inference = new_key().secret
    admin = new_key(name="ops", scope=ApiKeyScope.ADMIN).secret
    with pytest.raises(openai.PermissionDeniedError) as refused:
        oai(app_client, inference).get("/admin/pool", cast_to=object)
    assert refused.value.response.json()["error"]["type"] == "permission_error"
    assert oai(app_client, admin).get("/admin/pool", cast_to=object)
    # The admin scope covers inference too.
    assert oai(app_client, admin).models.list().data is not None


def test_requests_per_minute_over_the_limit_get_429_with_retry_after(app_client: TestClient) -> None:
    sdk = oai(app_client, new_key(requests_per_minute=2).secret)
    sdk.models.list()
    sdk.models.list()
    with pytest.raises(openai.RateLimitError) as refused:
        sdk.models.list()
    assert 1 <= int(refused.value.response.headers["retry-after"]) <= 60
    assert refused.value.response.json()["error"]["code"] == "rate_limit_exceeded"


def test_tokens_per_day_spent_get_429_until_midnight_utc(app_client: TestClient) -> None:
    key = new_key(tokens_per_day=100)
    yesterday = utcnow() - timedelta(days=1)
    add_audit_row(key_name="ci", prompt_tokens=500, completion_tokens=500, created_at=yesterday)
    add_audit_row(key_name="ci", prompt_tokens=40, completion_tokens=20)
    sdk = oai(app_client, key.secret)
    assert sdk.models.list().data is not None  # 60 of 100 today: yesterday's do not count
    add_audit_row(key_name="ci", prompt_tokens=30, completion_tokens=10)
    with pytest.raises(anthropic.RateLimitError) as refused:
        ask_claude(app_client, key.secret)
    now = utcnow()
    midnight = (now + timedelta(days=1)).replace(hour=0, minute=0, second=0, microsecond=0)
    retry_after = int(refused.value.response.headers["retry-after"])
    assert abs(retry_after - (midnight - now).total_seconds()) < 5
    assert "100 of its 100 tokens" in refused.value.response.json()["error"]["message"]


def test_keys_are_stored_only_as_hashes(app_client: TestClient) -> None:
    key = new_key()
    audit_service.flush()
    with get_engine().connect() as connection:
        row = connection.execute(text("SELECT * FROM api_keys")).mappings().one()
    assert row["key_hash"] == hashlib.sha256(key.secret.encode()).hexdigest()
    assert row["prefix"] == key.secret[:12]
    assert not any(key.secret[12:] in str(value) for value in row.values())
    database = get_settings().database_path
    for path in (database, Path(f"{database}-wal")):
        if path.exists():
            assert key.secret.encode() not in path.read_bytes()


def test_the_standalone_server_enforces_the_keys_of_the_shared_database(home: Path) -> None:
    upgrade_database()
    key = new_key(scope=ApiKeyScope.ADMIN)
    with TestClient(create_server_app()) as client:
        assert client.get("/v1/models").status_code == 401
        assert client.get("/v1/admin/pool", headers={"x-api-key": key.secret}).status_code == 200


def test_refusals_are_audited_with_the_key_name_when_the_key_is_known(app_client: TestClient) -> None:
    secret = _revoked()
    for sent in (secret, "mlx-unknown"):
        with pytest.raises(openai.AuthenticationError):
            list_models(app_client, sent)
    assert audit_service.flush()
    with Session(get_engine()) as session:
        rows = session.exec(select(AuditLog).order_by(AuditLog.id)).all()  # type: ignore[arg-type]
    assert [(r.status, r.key_name) for r in rows] == [(401, "ci"), (401, None)]
    assert all(secret not in (r.error or "") for r in rows)


def test_tokens_of_a_real_generation_count_towards_the_day(smol_app: TestClient) -> None:
    key = new_key(tokens_per_day=20)
    sdk = oai(smol_app, key.secret)
    reply = sdk.chat.completions.create(
        model="smol", messages=[{"role": "user", "content": "Say hi."}], max_tokens=4
    )
    assert reply.usage is not None and reply.usage.total_tokens > 20  # the prompt alone is longer
    assert audit_service.flush()
    with pytest.raises(openai.RateLimitError) as refused:
        sdk.chat.completions.create(
            model="smol", messages=[{"role": "user", "content": "Again."}], max_tokens=4
        )
    assert (
        f"has used {reply.usage.total_tokens} of its 20 tokens"
        in refused.value.response.json()["error"]["message"]
    )


def test_a_bind_off_loopback_needs_a_key_even_with_none_created(home: Path) -> None:
    upgrade_database()
    with TestClient(create_app(ManagerSettings(home=home, host="0.0.0.0"))) as client:
        with pytest.raises(openai.AuthenticationError):
            oai(client, "anything").models.list()
        key = new_key()
        assert oai(client, key.secret).models.list().data is not None
        assert client.get("/v1/health").status_code == 200  # monitors need no key
