"""Cluster nodes: another machine (a real `mlx-server serve` on loopback, home and keys of its own)
is added only once it has answered with its report and the key; a wrong key, an address where
nothing listens and something that is not an MLX server are refused with the reason; the list
asks every node and shows one that does not answer as unreachable, within its time bound."""

from __future__ import annotations

import asyncio
import hashlib
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient
from sqlmodel import Session

from mlx_server.distributed.nodes import node_url, node_views
from mlx_server.records import ClusterNode
from tests.fixtures.cluster_node import Node, mlx_server_node
from tests.support import LocalHTTPServer, free_port


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory, smollm_dir: Path) -> Iterator[Node]:
    with mlx_server_node(tmp_path_factory.mktemp("node"), {"smol": smollm_dir}) as running:
        yield running


def test_a_node_reports_its_memory_versions_backends_and_models(node: Node, smollm_dir: Path) -> None:
    import mlx.core as mx

    refused = httpx.get(f"{node.url}/v1/admin/node", timeout=10)
    assert refused.status_code == 401  # the report is an admin route
    report = httpx.get(
        f"{node.url}/v1/admin/node", headers={"Authorization": f"Bearer {node.admin_key}"}, timeout=10
    ).json()
    assert report["url"] == node.url and report["name"] == socket.gethostname()
    assert report["mlx_version"] == mx.__version__ and report["mlx_lm_version"].startswith("0.")
    assert report["backends"] == {"ring": True, "jaccl": False, "mpi": False}  # mlx[cpu] on Linux
    memory = report["memory"]
    assert memory["total_bytes"] > memory["budget_bytes"] > 0 and memory["pool_used_bytes"] == 0
    config_sha = hashlib.sha256((smollm_dir / "config.json").read_bytes()).hexdigest()
    assert report["models"] == [
        {"id": "smol", "path": str(smollm_dir), "type": "text-gen", "config_sha256": config_sha}
    ]


def test_adding_a_node_stores_it_and_lists_its_report_never_its_key(client: TestClient, node: Node) -> None:
    port = node.url.rsplit(":", 1)[1]
    added = client.post(
        "/v1/admin/cluster/nodes", json={"url": f"127.0.0.1:{port}", "api_key": node.admin_key}
    )
    assert added.status_code == 200, added.text
    name = socket.gethostname().split(".")[0]
    assert added.json()["name"] == name and added.json()["url"] == node.url
    listed = client.get("/v1/admin/cluster/nodes")
    [shown] = listed.json()["data"]
    assert shown["reachable"] and [m["id"] for m in shown["report"]["models"]] == ["smol"]
    assert node.admin_key not in listed.text and node.admin_key not in added.text

    other = client.post("/v1/admin/cluster/nodes", json={"url": "localhost:1", "api_key": "k", "name": name})
    assert other.status_code in (409, 400)  # the name is taken (or, first, nothing answers there)
    again = client.post(
        "/v1/admin/cluster/nodes", json={"url": node.url, "api_key": node.admin_key, "name": "b"}
    )
    assert again.status_code == 200 and len(client.get("/v1/admin/cluster/nodes").json()["data"]) == 2
    assert client.delete(f"/v1/admin/cluster/nodes/{name}").json() == {"deleted": name}
    gone = client.delete(f"/v1/admin/cluster/nodes/{name}")
    assert gone.status_code == 404 and "(nodes: b)" in gone.json()["error"]["message"]


def test_a_wrong_or_inference_key_is_refused_with_the_nodes_reason(client: TestClient, node: Node) -> None:
    wrong = client.post("/v1/admin/cluster/nodes", json={"url": node.url, "api_key": "mlx-not-a-key"})
    assert wrong.status_code == 400
    message = wrong.json()["error"]["message"]
    assert "refused the API key (401)" in message and "The API key is not valid" in message
    scoped = client.post("/v1/admin/cluster/nodes", json={"url": node.url, "api_key": node.inference_key})
    assert scoped.status_code == 400 and "(403)" in scoped.text and "admin scope" in scoped.text
    assert client.get("/v1/admin/cluster/nodes").json()["data"] == []


def test_an_address_where_nothing_listens_is_refused_at_once(client: TestClient) -> None:
    started = time.monotonic()
    refused = client.post("/v1/admin/cluster/nodes", json={"url": f"127.0.0.1:{free_port()}", "api_key": "k"})
    assert refused.status_code == 400 and "cannot be reached" in refused.text
    assert time.monotonic() - started < 5
    bad = client.post("/v1/admin/cluster/nodes", json={"url": "http://host:8080/v1", "api_key": "k"})
    assert bad.status_code == 400 and "is not a node address" in bad.text
    assert node_url("mac2") == "http://mac2:8080" and node_url("https://[::1]:9000/") == "https://[::1]:9000"


def test_a_server_that_is_not_an_mlx_node_is_refused(client: TestClient) -> None:
    from http.server import BaseHTTPRequestHandler

    class NotANode(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = b'{"hello": "world"}' if self.path == "/v1/admin/node" else b"{}"
            self.send_response(200 if self.path == "/v1/admin/node" else 404)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_: object) -> None:
            pass

    with LocalHTTPServer(NotANode) as server:
        refused = client.post(
            "/v1/admin/cluster/nodes", json={"url": f"127.0.0.1:{server.port}", "api_key": "k"}
        )
    assert refused.status_code == 400 and "not with an MLX node's report" in refused.text


def test_a_node_that_stops_answering_is_listed_as_unreachable_within_the_bound(session: Session) -> None:
    # A socket that accepts connections (the kernel's backlog) and never answers: a hung machine.
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        session.add(ClusterNode(name="hung", url=f"http://127.0.0.1:{silent.getsockname()[1]}", api_key="k"))
        session.add(ClusterNode(name="off", url=f"http://127.0.0.1:{free_port()}", api_key="k"))
        session.commit()
        started = time.monotonic()
        views = asyncio.run(node_views(session, timeout_s=0.5))
        took = time.monotonic() - started
    assert [(v.name, v.reachable) for v in views] == [("hung", False), ("off", False)]
    assert "did not answer within 0.5 s" in (views[0].error or "")
    assert "cannot be reached" in (views[1].error or "")
    assert took < 2  # asked at once, each bounded
