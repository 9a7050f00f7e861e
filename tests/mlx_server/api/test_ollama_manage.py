"""Ollama's model management on the standalone server: copy is a second name for the same
files, delete removes a name (and files only when no other name uses them), push says why
not, pull says the standalone server cannot download; all audited as Ollama's."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import ollama
import pytest
import uvicorn
from sqlmodel import Session, col, select

from mlx_server.database import get_engine
from mlx_server.main import create_app
from mlx_server.models.store import default_embedding_model_dir
from mlx_server.records import AuditLog, ModelCapabilities, ModelRecord
from mlx_server.services.operations.audit import audit_service
from mlx_server.services.operations.model_files import delete_model
from tests.mlx_server.api.conftest import register_models
from tests.support import free_port


@pytest.fixture
def client(home: Path) -> Iterator[ollama.Client]:
    """Ollama's own client on the standalone server, served on a loopback port in a thread."""
    register_models({"minilm": default_embedding_model_dir()})
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(create_app(), host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert time.monotonic() < deadline and thread.is_alive(), "the server did not start"
        time.sleep(0.05)
    yield ollama.Client(host=f"http://127.0.0.1:{port}", timeout=60)
    server.should_exit = True
    thread.join(timeout=10)


def test_copy_is_a_second_name_for_the_same_files(client: ollama.Client) -> None:
    with Session(get_engine()) as session:
        session.add(ModelCapabilities(model_id="minilm", model_type="embeddings", embedding_dimensions=384))
        session.commit()
    client.copy("minilm:latest", "minilm-copy")
    with Session(get_engine()) as session:
        original, copy = session.get(ModelRecord, "minilm"), session.get(ModelRecord, "minilm-copy")
        assert original is not None and copy is not None and copy.path == original.path
        copied = session.get(ModelCapabilities, "minilm-copy")
        assert copied is not None and copied.embedding_dimensions == 384
    listed = {m.model: m.details for m in client.list().models}
    assert listed["minilm-copy"] == listed["minilm"]
    assert listed["minilm"] is not None and listed["minilm"].parameter_size == "22.71M"
    assert listed["minilm"].quantization_level == "F32"
    with pytest.raises(ollama.ResponseError) as taken:
        client.copy("minilm", "minilm-copy")
    assert taken.value.status_code == 409 and "exists" in taken.value.error
    with pytest.raises(ollama.ResponseError) as missing:
        client.copy("nope", "other")
    assert missing.value.status_code == 404


def test_delete_removes_the_name_and_the_files_only_with_the_last_name(
    client: ollama.Client, tmp_path: Path
) -> None:
    client.copy("minilm", "minilm-copy")
    client.delete("minilm")
    names = {m.model for m in client.list().models}
    assert names == {"minilm-copy"}
    assert (default_embedding_model_dir() / "config.json").is_file()  # a user's directory stays
    with pytest.raises(ollama.ResponseError) as gone:
        client.delete("minilm")
    assert gone.value.status_code == 404
    with Session(get_engine()) as session:  # the shared-files rule, with files we own
        owned = tmp_path / "owned"
        owned.mkdir()
        (owned / "config.json").write_text("{}")
        session.add(ModelRecord(id="a", source="local", path=str(owned)))
        session.add(ModelRecord(id="b", source="local", path=str(owned)))
        session.commit()
        assert "stay for b" in delete_model(session, "a") and owned.is_dir()


def test_push_and_a_standalone_pull_say_why_not_and_are_audited(client: ollama.Client) -> None:
    with pytest.raises(ollama.ResponseError) as push:
        client.push("minilm")
    assert push.value.status_code == 400 and "huggingface-cli upload" in push.value.error
    with pytest.raises(ollama.ResponseError) as pull:
        client.pull("mlx-community/SmolLM2-135M-Instruct-4bit")
    assert pull.value.status_code == 400 and "mlx-manager serve" in pull.value.error
    with pytest.raises(ollama.ResponseError) as bare:
        client.pull("llama3")
    assert bare.value.status_code == 400 and "org/name" in bare.value.error
    audit_service.flush()
    with Session(get_engine()) as session:
        endpoints = ["POST /api/push", "POST /api/pull"]
        rows = session.exec(select(AuditLog).where(col(AuditLog.endpoint).in_(endpoints))).all()
    assert sorted((r.endpoint, r.status, r.protocol) for r in rows) == [
        ("POST /api/pull", 400, "ollama"),
        ("POST /api/pull", 400, "ollama"),
        ("POST /api/push", 400, "ollama"),
    ]
