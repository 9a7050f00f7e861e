"""`mlx-manager cluster add | list | remove` and the Cluster page, against a second machine (a real
`mlx-server serve` on loopback with its own home and keys): a node is added with its key, listed
with its facts, shown unreachable once it went away, removed; a wrong key is refused with the
node's reason."""

from __future__ import annotations

import time
from pathlib import Path

from fastapi.testclient import TestClient
from typer.testing import CliRunner

from mlx_manager.cli import app
from tests.fixtures.cluster_node import mlx_server_node
from tests.support import csrf_headers

runner = CliRunner()


def test_cluster_cli_adds_lists_and_removes_a_node_and_shows_it_gone(
    tmp_path: Path, smollm_dir: Path
) -> None:
    with mlx_server_node(tmp_path / "node", {"smol": smollm_dir}) as node:
        address = node.url.removeprefix("http://")
        wrong = runner.invoke(app, ["cluster", "add", address, "--key", "mlx-wrong", "--name", "mac2"])
        assert wrong.exit_code == 1 and "refused the API key (401)" in wrong.output
        added = runner.invoke(app, ["cluster", "add", address, "--key", node.admin_key, "--name", "mac2"])
        assert added.exit_code == 0, added.output
        assert added.output.startswith(f"added mac2 ({node.url}): MLX ") and "1 models" in added.output
        listed = runner.invoke(app, ["cluster", "list"])
        assert listed.exit_code == 0 and "mac2" in listed.output and " up " in listed.output
        assert "ring" in listed.output and "smol" in listed.output and node.admin_key not in listed.output

    started = time.monotonic()
    gone = runner.invoke(app, ["cluster", "list"])
    assert gone.exit_code == 0 and "unreachable" in gone.output and "cannot be reached" in gone.output
    assert time.monotonic() - started < 5
    assert runner.invoke(app, ["cluster", "remove", "mac2"]).output == "removed mac2\n"
    unknown = runner.invoke(app, ["cluster", "remove", "mac2"])
    assert unknown.exit_code == 1 and "No cluster node is named 'mac2'" in unknown.output
    assert "no nodes" in runner.invoke(app, ["cluster", "list"]).output
    bad = runner.invoke(app, ["cluster", "add", "http://x:1/v1", "--key", "k"])
    assert bad.exit_code == 1 and "is not a node address" in bad.output


def test_cluster_page_adds_shows_and_removes_a_node(
    client: TestClient, tmp_path: Path, smollm_dir: Path
) -> None:
    headers = csrf_headers(client)
    page = client.get("/cluster")
    assert page.status_code == 200 and 'href="/cluster" aria-current="page"' in page.text
    assert "(this machine)" in page.text and "No nodes yet" in page.text

    with mlx_server_node(tmp_path / "node", {"smol": smollm_dir}) as node:
        form = {"host": node.url, "api_key": "mlx-wrong", "name": "mac2"}
        refused = client.post("/cluster/nodes", data=form, headers=headers)
        assert refused.status_code == 400 and "refused the API key (401)" in refused.text
        added = client.post("/cluster/nodes", data={**form, "api_key": node.admin_key}, headers=headers)
        assert added.status_code == 200 and "Node mac2 added." in added.text
        row = added.text.split('data-node="mac2"')[1].split("</tr>")[0]
        assert 'data-testid="node-state-mac2">up<' in row and "<code title=" in row and ">smol</code>" in row
        assert "ring" in row and "MLX 0." in row and node.admin_key not in added.text

    fragment = client.get("/cluster", headers={"HX-Request": "true"})
    assert "<h1>" not in fragment.text and "unreachable: " in fragment.text  # the node went away
    removed = client.post("/cluster/nodes/remove", data={"name": "mac2"}, headers=headers)
    assert "Node mac2 removed." in removed.text and 'data-node="mac2"' not in removed.text
