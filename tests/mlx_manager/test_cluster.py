"""`mlx-manager cluster add | list | remove` and the Cluster page, against a second machine (a real
`mlx-server serve` on loopback with its own home and keys; one per test run here, it takes seconds
to start): a node is added with its key, listed with its facts, shown unreachable once it went
away, removed; a wrong key is refused with the node's reason."""

from __future__ import annotations

import time
from pathlib import Path

from fastapi.testclient import TestClient
from typer.testing import CliRunner

from mlx_manager.cli import app
from tests.fixtures.cluster_node import mlx_server_node
from tests.support import csrf_headers

runner = CliRunner()


def test_nodes_added_by_cli_and_page_are_listed_with_their_facts_then_shown_gone(
    client: TestClient, tmp_path: Path, smollm_dir: Path
) -> None:
    headers = csrf_headers(client)
    page = client.get("/cluster")
    assert page.status_code == 200 and 'href="/cluster" aria-current="page"' in page.text
    assert "(this machine)" in page.text and "No nodes yet" in page.text

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

        form = {"host": node.url, "api_key": node.inference_key, "name": "mac3"}
        refused = client.post("/cluster/nodes", data=form, headers=headers)
        assert refused.status_code == 400 and "refused the API key (403)" in refused.text
        shown = client.post("/cluster/nodes", data={**form, "api_key": node.admin_key}, headers=headers)
        assert shown.status_code == 200 and "Node mac3 added." in shown.text
        row = shown.text.split('data-node="mac2"')[1].split("</tr>")[0]
        assert 'data-testid="node-state-mac2">up<' in row and "<code title=" in row and ">smol</code>" in row
        assert "ring" in row and "MLX 0." in row and node.admin_key not in shown.text

    started = time.monotonic()
    gone = runner.invoke(app, ["cluster", "list"])
    assert gone.exit_code == 0 and "unreachable" in gone.output and "mac3: " in gone.output
    assert "cannot be reached" in gone.output and time.monotonic() - started < 5
    fragment = client.get("/cluster", headers={"HX-Request": "true"})
    assert "<h1>" not in fragment.text and fragment.text.count("unreachable: ") == 2
    removed = client.post("/cluster/nodes/remove", data={"name": "mac3"}, headers=headers)
    assert "Node mac3 removed." in removed.text and 'data-node="mac3"' not in removed.text
    assert runner.invoke(app, ["cluster", "remove", "mac2"]).output == "removed mac2\n"
    unknown = runner.invoke(app, ["cluster", "remove", "mac2"])
    assert unknown.exit_code == 1 and "No cluster node is named 'mac2'" in unknown.output
    assert "no nodes" in runner.invoke(app, ["cluster", "list"]).output


def test_cluster_cli_prints_its_help_and_refuses_what_is_not_an_address() -> None:
    bare = runner.invoke(app, ["cluster"])
    assert bare.exit_code == 0 and all(f" {verb} " in bare.output for verb in ("add", "list", "remove"))
    bad = runner.invoke(app, ["cluster", "add", "http://x:1/v1", "--key", "k"])
    assert bad.exit_code == 1 and "is not a node address" in bad.output
