"""The manager's /metrics: the dashboard login or an admin API key, unless made public."""

from __future__ import annotations

from pathlib import Path

from fastapi.testclient import TestClient
from sqlmodel import Session

from mlx_manager.config import ManagerSettings
from mlx_manager.main import create_app
from mlx_manager.services.admin_account import set_password
from mlx_server.database import get_engine, upgrade_database
from mlx_server.records import ApiKeyScope
from mlx_server.services.operations.api_keys import create_api_key

PASSWORD = "correct horse battery"


def test_manager_metrics_follow_the_login_or_an_admin_key(home: Path) -> None:
    upgrade_database()
    with Session(get_engine()) as session:
        set_password(session, PASSWORD)
        admin = create_api_key(session, name="ops", scope=ApiKeyScope.ADMIN).secret
    app = create_app(ManagerSettings(home=home, require_login=True))
    with TestClient(app, follow_redirects=False) as client:
        refused = client.get("/metrics")
        assert refused.status_code == 401 and "dashboard login" in refused.text
        client.get("/v1/models", headers={"Authorization": f"Bearer {admin}"})
        scraped = client.get("/metrics", headers={"Authorization": f"Bearer {admin}"})
        assert scraped.status_code == 200
        # The embedded server's requests, counted in the manager's /metrics.
        counted = 'mlx_server_requests_total{endpoint="GET /v1/models",model="",status="200"} 1.0'
        assert counted in scraped.text
        client.get("/login")
        client.headers["X-CSRF-Token"] = client.cookies["mlx_csrf"]
        client.post("/login", data={"password": PASSWORD, "next": "/models"})
        assert client.get("/metrics").status_code == 200  # the session alone


def test_manager_metrics_open_when_the_dashboard_is(home: Path) -> None:
    upgrade_database()
    with TestClient(create_app(ManagerSettings(home=home))) as client:
        assert client.get("/metrics").status_code == 200


def test_manager_metrics_need_an_admin_key_or_the_login_once_keys_exist_on_loopback(home: Path) -> None:
    """The dashboard needs no login on loopback, but /v1 needs keys once one exists: so does
    /metrics (issue 31: it stayed open)."""
    upgrade_database()
    with Session(get_engine()) as session:
        set_password(session, PASSWORD)
        inference = create_api_key(session, name="app").secret
        admin = create_api_key(session, name="ops", scope=ApiKeyScope.ADMIN).secret
    with TestClient(create_app(ManagerSettings(home=home)), follow_redirects=False) as client:
        assert client.get("/models").status_code == 200  # the pages stay open on loopback
        refused = client.get("/metrics")
        assert refused.status_code == 401 and "admin scope" in refused.text
        narrow = client.get("/metrics", headers={"Authorization": f"Bearer {inference}"})
        assert narrow.status_code == 403
        assert client.get("/metrics", headers={"Authorization": f"Bearer {admin}"}).status_code == 200
        client.get("/login")
        client.headers["X-CSRF-Token"] = client.cookies["mlx_csrf"]
        client.post("/login", data={"password": PASSWORD, "next": "/models"})
        assert client.get("/metrics").status_code == 200  # a dashboard session


def test_manager_metrics_need_the_login_when_the_pages_do(home: Path) -> None:
    upgrade_database()
    with TestClient(create_app(ManagerSettings(home=home, require_login=True))) as client:
        assert client.get("/metrics").status_code == 401  # no key exists, but the pages are closed
