"""API keys: creation rules, revocation, the bind policy, and `mlx-server` refusing to start."""

from __future__ import annotations

import pytest
from sqlmodel import Session
from typer.testing import CliRunner

from mlx_server.cli import cli
from mlx_server.records import ApiKeyScope
from mlx_server.services.operations.api_keys import (
    ApiKeyError,
    KeyState,
    bind_refusal,
    create_api_key,
    find_api_key,
    key_state,
    keys_required,
    list_api_keys,
    revoke_api_key,
)


def test_a_key_is_shown_once_and_found_by_its_hash(session: Session) -> None:
    created = create_api_key(session, name="agent", scope=ApiKeyScope.ADMIN, tokens_per_day=1000)
    assert created.secret.startswith("mlx-") and len(created.secret) > 40
    found = find_api_key(session, created.secret)
    assert found is not None and found.name == "agent" and found.scope == ApiKeyScope.ADMIN
    assert find_api_key(session, created.secret + "x") is None
    assert [key.name for key in list_api_keys(session)] == ["agent"]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"name": ""}, "1 to 64 letters"),
        ({"name": "x" * 65}, "1 to 64 letters"),
        ({"name": "<script>"}, "1 to 64 letters"),
        ({"name": "ok", "expires_in_days": 0}, "positive number of days"),
        ({"name": "ok", "requests_per_minute": 0}, "Requests per minute must be at least 1"),
        ({"name": "ok", "tokens_per_day": -5}, "Tokens per day must be at least 1"),
    ],
)
def test_invalid_keys_are_refused_with_what_to_change(
    session: Session, options: dict[str, object], message: str
) -> None:
    with pytest.raises(ApiKeyError, match=message):
        create_api_key(session, **options)  # type: ignore[arg-type]
    assert list_api_keys(session) == []


def test_names_are_unique_and_revocation_is_kept(session: Session) -> None:
    create_api_key(session, name="agent")
    with pytest.raises(ApiKeyError, match="exists already"):
        create_api_key(session, name="agent")
    first = revoke_api_key(session, "agent").revoked_at
    assert first is not None
    assert revoke_api_key(session, "agent").revoked_at == first
    assert key_state(list_api_keys(session)[0]) is KeyState.REVOKED
    with pytest.raises(ApiKeyError, match="No key is named"):
        revoke_api_key(session, "nobody")


def test_keys_are_required_off_loopback_or_once_one_exists_even_revoked(session: Session) -> None:
    assert not keys_required(session, "127.0.0.1")
    assert keys_required(session, "0.0.0.0")
    create_api_key(session, name="agent")
    revoke_api_key(session, "agent")
    assert keys_required(session, "localhost")


def test_bind_refusal_only_off_loopback_with_neither_key_nor_password() -> None:
    assert bind_refusal("127.0.0.1", has_key=False, has_password=False) is None
    assert bind_refusal("0.0.0.0", has_key=True, has_password=False) is None
    assert bind_refusal("0.0.0.0", has_key=False, has_password=True) is None
    message = bind_refusal("0.0.0.0", has_key=False, has_password=False)
    assert message is not None
    assert "mlx-manager keys create" in message and "mlx-manager admin set-password" in message


def test_mlx_server_refuses_a_network_bind_without_a_key() -> None:
    result = CliRunner().invoke(cli, ["serve", "--host", "0.0.0.0", "--port", "1"])
    assert result.exit_code == 2
    assert "Refusing to listen on 0.0.0.0" in result.output
    assert "mlx-manager keys create" in result.output
