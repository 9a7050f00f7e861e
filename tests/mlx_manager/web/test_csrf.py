"""Dashboard writes need the CSRF token; the /v1 API and reads do not."""

from __future__ import annotations

from fastapi import APIRouter, Form
from fastapi.testclient import TestClient

from mlx_manager.main import create_app
from tests.support import csrf_headers


def _client_with_echo_route() -> TestClient:
    app = create_app()
    router = APIRouter()

    @router.post("/echo")
    def echo(value: str = Form("")) -> dict[str, str]:
        return {"value": value}

    app.include_router(router)
    return TestClient(app)


def test_first_page_sets_the_token_cookie_and_renders_it_for_htmx(client: TestClient) -> None:
    response = client.get("/")
    token = response.cookies["mlx_csrf"]
    assert len(token) >= 32
    assert f'"X-CSRF-Token": "{token}"' in response.text
    assert "SameSite=Strict" in response.headers["set-cookie"]
    # Once set, the cookie is kept: the page renders the same token and sets nothing new.
    again = client.get("/models")
    assert "set-cookie" not in again.headers
    assert token in again.text


def test_post_without_token_is_refused_with_a_reason() -> None:
    with _client_with_echo_route() as client:
        client.get("/")
        response = client.post("/echo", data={"value": "x"})
        assert response.status_code == 403
        assert "CSRF" in response.json()["detail"]
        wrong = client.post("/echo", data={"value": "x"}, headers={"X-CSRF-Token": "not-the-cookie"})
        assert wrong.status_code == 403


def test_post_with_header_or_form_field_passes_and_keeps_the_body() -> None:
    with _client_with_echo_route() as client:
        headers = csrf_headers(client)
        assert client.post("/echo", data={"value": "a"}, headers=headers).json() == {"value": "a"}
        token = headers["X-CSRF-Token"]
        by_form = client.post("/echo", data={"value": "b", "csrf_token": token})
        assert by_form.json() == {"value": "b"}


def test_multipart_form_carries_the_token_as_a_field_and_its_body_reaches_the_route() -> None:
    """A plain form with a file (the chat composer with an image) sends the token in its body."""
    with _client_with_echo_route() as client:
        token = csrf_headers(client)["X-CSRF-Token"]
        image = {"images": ("a.png", b"\x89PNG" + bytes(300_000), "image/png")}
        refused = client.post("/echo", data={"value": "m"}, files=image)
        assert refused.status_code == 403
        wrong = client.post("/echo", data={"value": "m", "csrf_token": "x" * 43}, files=image)
        assert wrong.status_code == 403
        passed = client.post("/echo", data={"value": "m", "csrf_token": token}, files=image)
        assert passed.json() == {"value": "m"}


def test_forged_cookie_shape_is_replaced_not_trusted() -> None:
    with _client_with_echo_route() as client:
        client.cookies.set("mlx_csrf", 'x"><script>')
        page = client.get("/")
        assert "<script>" not in page.text.split("<body", 1)[1].split(">", 1)[0]
        response = client.post("/echo", data={"value": "x"}, headers={"X-CSRF-Token": 'x"><script>'})
        assert response.status_code == 403


def test_api_under_v1_needs_no_token(client: TestClient) -> None:
    response = client.post("/v1/chat/completions", json={"model": "missing", "messages": []})
    assert response.status_code != 403
