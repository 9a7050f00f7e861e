"""Issue 31's unbounded strings: 20 requests naming 7 MB models grew /metrics by 280 MB, the
database by 300 MB and one audit page to 287 MB. Now they are 400s that leave every one of those
about as it was; rows an older version stored whole are cut on the pages and in the exports;
and a GGUF import id too long for a file name is a clear 400, not a 500."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from fastapi.testclient import TestClient

from mlx_server.config import get_settings
from mlx_server.records import AuditLog
from mlx_server.services.operations.audit import audit_service
from tests.support import csrf_headers

SEVEN_MB = 7 * 1024 * 1024
ATTACKED = [
    ("/v1/chat/completions", lambda name: {"model": name, "messages": [{"role": "user", "content": "Hi"}]}),
    ("/api/chat", lambda name: {"model": name, "messages": [{"role": "user", "content": "Hi"}]}),
    (
        "/v1/messages",
        lambda name: {"model": name, "max_tokens": 4, "messages": [{"role": "user", "content": "Hi"}]},
    ),
    ("/v1/embeddings", lambda name: {"model": name, "input": "Hi"}),
    ("/v1/responses", lambda name: {"model": name, "input": "Hi"}),
]


def _database_bytes() -> int:
    """The database file's size with its write-ahead log folded in (the log's own size is
    churn: pages written and rewritten until a checkpoint)."""
    path = get_settings().database_path
    with sqlite3.connect(path) as db:
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return path.stat().st_size


def test_seven_megabyte_model_names_grow_neither_metrics_nor_database_nor_audit_page(
    client: TestClient,
) -> None:
    client.get("/v1/models")  # every series but the attacked ones exists already
    assert audit_service.flush(5)
    metrics_before, database_before = len(client.get("/metrics").content), _database_bytes()
    for number in range(20):
        path, body = ATTACKED[number % len(ATTACKED)]
        name = f"{number:02d}" + "m" * SEVEN_MB  # each a different name: a new series each, before
        response = client.post(
            path, content=json.dumps(body(name)), headers={"Content-Type": "application/json"}
        )
        assert response.status_code == 400, response.text[:300]
        assert "'model'" in response.text and "256 characters" in response.text
    assert audit_service.flush(5)
    metrics = client.get("/metrics")
    assert len(metrics.content) - metrics_before < 64 * 1024, len(metrics.content) - metrics_before
    assert 'status="400"' in metrics.text  # counted, as requests that named no model
    assert _database_bytes() - database_before < 256 * 1024
    page = client.get("/audit")
    assert page.status_code == 200 and len(page.content) < 256 * 1024 and page.text.count("audit-row") >= 20


def test_values_an_older_version_stored_whole_are_cut_on_the_pages_and_in_the_exports(
    client: TestClient,
) -> None:
    huge = AuditLog(
        request_id="old",
        endpoint="POST /v1/chat/completions",
        model="m" * SEVEN_MB,
        status=404,
        latency_ms=3.0,
        error="e" * 1_000_000,
        parameters={"stop": ["s" * 1_000_000], "tools": [f"t{i}" for i in range(10_000)]},
    )
    audit_service.record(huge)
    assert audit_service.flush(5)
    for url in ("/audit", f"/audit/{huge.id}", "/audit/export.csv", "/audit/export.jsonl", "/v1/admin/audit"):
        response = client.get(url)
        assert response.status_code == 200 and len(response.content) < 256 * 1024, (
            url,
            len(response.content),
        )
        assert "characters in all" in response.text, url  # and it says so
    detail = client.get(f"/audit/{huge.id}").text
    assert "10000 items in all" in detail


def test_a_gguf_import_id_too_long_for_a_file_name_is_a_clear_400(
    client: TestClient, smollm_gguf: Path
) -> None:
    client.get("/models")
    too_long = "m" * 300
    response = client.post(
        "/models/import", data={"path": str(smollm_gguf), "model_id": too_long}, headers=csrf_headers(client)
    )
    assert response.status_code == 400, response.text[:500]
    assert "at most 190" in response.text and "File name too long" not in response.text
    models = get_settings().models_dir
    assert not models.exists() or not any(models.iterdir())  # nothing staged or left behind
