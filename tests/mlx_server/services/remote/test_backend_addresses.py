"""Remote backends may be on this machine or the LAN, never on a link-local address (where the
cloud metadata service of the machine the server runs on answers), in any spelling of it,
unless MLX_SERVER_REMOTE_ALLOWED_NETWORKS lists the network (issue 31)."""

from __future__ import annotations

import asyncio
import ipaddress

import pytest
from fastapi.testclient import TestClient

from mlx_server.config import reset_settings
from mlx_server.errors import APIError
from mlx_server.main import create_app as create_server_app
from mlx_server.services.remote.backends import check_address
from mlx_server.utils.addresses import IPAddress


def _backend(url: str) -> dict[str, str]:
    return {"name": "meta", "kind": "openai", "base_url": url}


REFUSED = [
    ("http://169.254.169.254/v1", "address 169.254.169.254 is the cloud metadata address"),
    ("http://[::ffff:169.254.169.254]/v1", "address ::ffff:169.254.169.254 is the cloud metadata"),
    ("http://[::ffff:a9fe:a9fe]:80/v1", "address ::ffff:a9fe:a9fe is the cloud metadata address"),
    ("http://[64:ff9b::169.254.169.254]/v1", "is the cloud metadata address"),  # NAT64
    ("http://169.254.7.7:8080/v1", "address 169.254.7.7 is a link-local address"),
    ("http://[fe80::1]:8000/v1", "address fe80::1 is a link-local address"),
]


def test_link_local_and_metadata_backend_urls_are_refused() -> None:
    with TestClient(create_server_app()) as client:
        for url, reason in REFUSED:
            refused = client.post("/v1/admin/backends?refresh=false", json=_backend(url))
            assert refused.status_code == 400, refused.text
            error = refused.json()["error"]
            assert reason in error["message"] and error["param"] == "base_url", error
        assert client.get("/v1/admin/backends").json()["data"] == []  # nothing stored
        local = client.post("/v1/admin/backends?refresh=false", json=_backend("http://127.0.0.1:9/v1"))
        assert local.status_code == 200  # loopback and LAN servers are what backends are for


def test_a_name_resolving_to_the_metadata_address_is_refused() -> None:
    async def resolve(host: str, port: int) -> list[IPAddress]:
        return [ipaddress.ip_address("169.254.169.254")] if host == "metadata.internal" else []

    with pytest.raises(APIError, match=r"host metadata\.internal resolves to 169\.254\.169\.254, the cloud"):
        asyncio.run(check_address("http://metadata.internal/v1", resolve))


def test_a_listed_network_allows_a_link_local_backend(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MLX_SERVER_REMOTE_ALLOWED_NETWORKS", '["169.254.0.0/16"]')  # a Thunderbolt bridge
    reset_settings()
    with TestClient(create_server_app()) as client:
        saved = client.post("/v1/admin/backends?refresh=false", json=_backend("http://169.254.7.7:8080/v1"))
        assert saved.status_code == 200, saved.text


def test_a_key_no_http_header_can_carry_is_refused_when_given() -> None:
    """An accented letter or a space in a key this server sends on (a backend's, a node's) was
    stored, then a 500 on first use (found by the schemathesis run on /v1/admin/cluster/nodes)."""
    with TestClient(create_server_app()) as client:
        for path, body in (
            ("/v1/admin/backends?refresh=false", {**_backend("http://127.0.0.1:9/v1"), "api_key": "sk-cô"}),
            ("/v1/admin/cluster/nodes", {"url": "0", "api_key": "clé admin"}),
        ):
            refused = client.post(path, json=body)
            assert refused.status_code == 400, refused.text
            error = refused.json()["error"]
            assert error["param"] == "api_key" and "printable ASCII without spaces" in error["message"], error
        assert client.get("/v1/admin/backends").json()["data"] == []
        assert client.get("/v1/admin/cluster/nodes").json()["data"] == []
