"""The Keys page: a created key is shown once, listed by prefix after, revoked at once."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlmodel import Session, select

from mlx_manager.main import create_app
from mlx_server.database import get_engine, upgrade_database
from mlx_server.records import ApiKey, ApiKeyScope
from tests.support import csrf_headers


@pytest.fixture
def page(home: Path) -> Iterator[TestClient]:
    upgrade_database()
    with TestClient(create_app(), follow_redirects=False) as client:
        client.headers.update(csrf_headers(client))
        yield client


def _create(page: TestClient, **fields: str) -> str:
    response = page.post("/keys", data={"name": "agent", **fields})
    assert response.status_code == 200, response.text
    start = response.text.index('<code class="secret-key">') + len('<code class="secret-key">')
    return response.text[start : response.text.index("</code>", start)]


def test_a_created_key_is_shown_once_then_only_its_prefix(page: TestClient) -> None:
    assert "/v1</code> is open" in page.get("/keys").text
    secret = _create(page, scope="admin", expires_in_days="30", requests_per_minute="60", tokens_per_day="")
    listed = page.get("/keys").text
    assert secret not in listed and secret[:12] in listed
    assert "Every <code>/v1</code> request needs a valid key" in listed
    with Session(get_engine()) as session:
        key = session.exec(select(ApiKey)).one()
    assert (key.name, key.scope, key.requests_per_minute, key.tokens_per_day) == (
        "agent",
        ApiKeyScope.ADMIN,
        60,
        None,
    )
    assert key.expires_at is not None
    assert page.get("/v1/models", headers={"Authorization": f"Bearer {secret}"}).status_code == 200


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"name": "  "}, "1 to 64 letters"),
        ({"scope": "root"}, "Scope must be inference or admin"),
        ({"tokens_per_day": "lots"}, "Tokens per day must be a number"),
        ({"requests_per_minute": "0"}, "Requests per minute must be at least 1"),
    ],
)
def test_a_refused_form_says_what_to_change_and_keeps_the_input(
    page: TestClient, fields: dict[str, str], message: str
) -> None:
    response = page.post("/keys", data={"name": "agent", **fields})
    assert response.status_code == 400
    assert message in response.text
    assert 'class="secret-key"' not in response.text
    with Session(get_engine()) as session:
        assert session.exec(select(ApiKey)).first() is None


def test_revoking_a_key_refuses_it_at_once(page: TestClient) -> None:
    secret = _create(page)
    revoked = page.post("/keys/revoke", data={"name": "agent"})
    assert revoked.status_code == 303 and revoked.headers["location"] == "/keys?revoked=agent"
    listed = page.get(revoked.headers["location"]).text
    assert "Key &#39;agent&#39; revoked." in listed and "<td>revoked</td>" in listed
    assert page.get("/v1/models", headers={"x-api-key": secret}).status_code == 401


def test_key_forms_need_the_csrf_token(page: TestClient) -> None:
    del page.headers["X-CSRF-Token"]
    assert page.post("/keys", data={"name": "agent"}).status_code == 403
    with Session(get_engine()) as session:
        assert session.exec(select(ApiKey)).first() is None
