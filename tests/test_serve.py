"""`mlx-manager serve` as a user runs it: a real process on a loopback port."""

from __future__ import annotations

from pathlib import Path

import httpx
from sqlmodel import Session

from mlx_manager.services.admin_account import LOGIN_ATTEMPTS, set_password
from mlx_server.database import get_engine, upgrade_database
from mlx_server.models.store import DEFAULT_EMBEDDING_MODEL_ID, DEFAULT_MODEL_ID, DEFAULT_STT_MODEL_ID
from tests.support import ServerProcess

PASSWORD = "correct horse battery"


def test_serve_imports_the_default_models_once(home: Path, tmp_path: Path) -> None:
    log = tmp_path / "serve.log"
    first = ServerProcess(home, log)
    url = first.url
    try:
        health = first.start()
        assert health["models"] == 3
        assert httpx.get(f"{url}/v1/health").json()["models"] == 3
        page = httpx.get(f"{url}/models").text
        assert all(
            model in page for model in (DEFAULT_MODEL_ID, DEFAULT_EMBEDDING_MODEL_ID, DEFAULT_STT_MODEL_ID)
        )
    finally:
        first.stop()
    assert log.read_text().count("imported default model") == 3
    model_dir = home / "models" / DEFAULT_MODEL_ID
    first_import = model_dir.stat().st_mtime_ns

    second = ServerProcess(home, log)
    try:
        assert second.start()["models"] == 3
    finally:
        second.stop()
    assert log.read_text().count("imported default model") == 3
    assert sorted(p.name for p in (home / "models").iterdir()) == sorted(
        [DEFAULT_MODEL_ID, DEFAULT_EMBEDDING_MODEL_ID, DEFAULT_STT_MODEL_ID]
    )
    assert model_dir.stat().st_mtime_ns == first_import


def _locked_out_login(home: Path, tmp_path: Path, env: dict[str, str]) -> tuple[ServerProcess, httpx.Client]:
    """A real serve that asks for the password, and a client that has just been locked out from
    127.0.0.1 by five wrong passwords."""
    upgrade_database()
    with Session(get_engine()) as session:
        set_password(session, PASSWORD)
    env = {"MLX_MANAGER_REQUIRE_LOGIN": "true", "MLX_MANAGER_IMPORT_DEFAULT_MODEL": "false", **env}
    server = ServerProcess(home, tmp_path / "serve.log", env=env)
    server.start()
    client = httpx.Client(base_url=server.url, timeout=30)
    client.get("/login")
    client.headers["X-CSRF-Token"] = client.cookies["mlx_csrf"]
    for _ in range(LOGIN_ATTEMPTS):
        assert client.post("/login", data={"password": "wrong password!"}).status_code == 401
    assert client.post("/login", data={"password": "wrong password!"}).status_code == 429
    return server, client


def _guess(client: httpx.Client, forwarded_for: str, password: str = "wrong password!") -> int:
    response = client.post("/login", data={"password": password}, headers={"X-Forwarded-For": forwarded_for})
    return response.status_code


def test_the_login_throttle_is_not_fooled_by_x_forwarded_for(home: Path, tmp_path: Path) -> None:
    """The attack: once locked out, claim to be ten other clients, then log in as an eleventh."""
    server, client = _locked_out_login(home, tmp_path, {})
    try:
        assert [_guess(client, f"10.9.8.{i}") for i in range(10)] == [429] * 10
        assert _guess(client, "10.9.8.99", PASSWORD) == 429
    finally:
        client.close()
        server.stop()


def test_a_listed_proxy_names_the_client(home: Path, tmp_path: Path) -> None:
    """Behind a proxy on 127.0.0.1 set as trusted, each forwarded client has its own count."""
    server, client = _locked_out_login(home, tmp_path, {"MLX_SERVER_TRUSTED_PROXIES": '["127.0.0.1"]'})
    try:
        assert _guess(client, "10.9.8.1") == 401
        assert _guess(client, "10.9.8.2", PASSWORD) == 303
    finally:
        client.close()
        server.stop()
