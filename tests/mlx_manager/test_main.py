"""The manager app: health, pages, static assets, the server mounted at /v1."""

from __future__ import annotations

import re

from fastapi.testclient import TestClient
from sqlmodel import Session

from mlx_server import __version__
from mlx_server.database import get_engine, head_revision
from mlx_server.main import create_app as create_server_app
from mlx_server.records import ModelRecord, ModelSource
from tests.mlx_manager.audit_rows import add_audit_row


def _add_model(model_id: str = "smol") -> None:
    with Session(get_engine()) as session:
        session.add(
            ModelRecord(
                id=model_id, source=ModelSource.GGUF_IMPORT, path=f"/m/{model_id}", size_bytes=3 * 2**20
            )
        )
        session.commit()


def test_health_reports_version_database_and_model_count(client: TestClient) -> None:
    _add_model()
    response = client.get("/health")
    assert response.status_code == 200
    body = response.json()
    assert body["status"] == "ok"
    assert body["version"] == __version__
    assert body["database"]["status"] == "ok"
    assert body["database"]["revision"] == head_revision()
    assert body["models"] == 1


def test_embedded_server_answers_under_v1_with_the_same_database(client: TestClient) -> None:
    _add_model()
    body = client.get("/v1/health").json()
    assert body["models"] == 1
    assert body["database"]["path"] == client.get("/health").json()["database"]["path"]


def test_standalone_server_migrates_and_reports_health() -> None:
    with TestClient(create_server_app(embedded=False)) as client:
        body = client.get("/health").json()
    assert body["status"] == "ok"
    assert body["database"]["revision"] == head_revision()


def test_home_page_shows_navigation_and_models(client: TestClient) -> None:
    _add_model("my-model")
    page = client.get("/")
    assert page.status_code == 200
    assert "text/html" in page.headers["content-type"]
    for link in ('href="/models"', 'href="/audit"', 'href="/settings"'):
        assert link in page.text
    assert "my-model" in page.text
    assert 'data-testid="model-count">1<' in page.text


def test_models_page_lists_registered_models(client: TestClient) -> None:
    _add_model("listed-model")
    page = client.get("/models")
    assert page.status_code == 200
    assert "listed-model" in page.text and "gguf-import" in page.text and "3.0 MiB" in page.text


def test_audit_page_shows_recorded_requests(client: TestClient) -> None:
    add_audit_row(
        request_id="req-1",
        endpoint="/v1/chat/completions",
        model="smol",
        status=404,
        error="model 'x' not found",
    )
    page = client.get("/audit")
    assert page.status_code == 200
    assert "/v1/chat/completions" in page.text and "model &#39;x&#39; not found" in page.text


def test_settings_page_names_the_environment_variables(client: TestClient) -> None:
    page = client.get("/settings")
    assert page.status_code == 200
    assert "MLX_MANAGER_HOME" in page.text and "mlx-manager.db" in page.text


def test_every_asset_is_served_by_us(client: TestClient) -> None:
    page = client.get("/").text
    assets = re.findall(r'(?:src|href)="([^"]+)"', page)
    assert assets, "the page references no assets"
    assert not [a for a in assets if a.startswith(("http:", "https:", "//"))]
    for asset in (a for a in assets if a.startswith("/static/")):
        assert client.get(asset).status_code == 200
    assert client.get("/static/htmx-2.0.11.min.js").text.startswith("var htmx=")
