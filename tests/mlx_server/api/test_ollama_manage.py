"""Ollama's model management on the standalone server: copy is a second name for the same
files, create a named preset of a model (its files, its own defaults), delete removes a name
(and files only when no other name uses them), push says why not, pull says the standalone
server cannot download; all audited as Ollama's."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import ollama
import pytest
from sqlmodel import Session, col, select

from mlx_server.database import get_engine
from mlx_server.main import create_app
from mlx_server.models.store import default_embedding_model_dir
from mlx_server.records import AuditLog, ModelCapabilities, ModelRecord
from mlx_server.services.operations.audit import audit_service
from mlx_server.services.operations.model_files import delete_model
from tests.mlx_server.api.conftest import register_models
from tests.support import uvicorn_server


@pytest.fixture
def client(home: Path, smollm_dir: Path) -> Iterator[ollama.Client]:
    """Ollama's own client on the standalone server, served on a loopback port in a thread."""
    register_models({"minilm": default_embedding_model_dir(), "smol": smollm_dir})
    with uvicorn_server(create_app()) as url:
        yield ollama.Client(host=url, timeout=60)


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
    assert listed["minilm-copy"] == listed["minilm"] and listed["smol"] != listed["minilm"]
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
    assert names == {"minilm-copy", "smol"}
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


PIRATE = "You are a pirate. Answer in one short sentence."


def test_create_makes_a_preset_that_answers_with_its_system_prompt_and_parameters(
    client: ollama.Client,
) -> None:
    question = [{"role": "user", "content": "What is the capital of France?"}]
    steps = [
        p.status
        for p in client.create(
            model="smol-pirate",
            from_="smol:latest",
            system=PIRATE,
            parameters={"temperature": 0, "num_predict": 12, "stop": ["\n\n"]},
            stream=True,
        )
    ]
    assert steps[-1] == "success" and any("layer" in (step or "") for step in steps)
    shown = client.show("smol-pirate")
    assert shown.modelfile is not None and f'SYSTEM """{PIRATE}"""' in shown.modelfile
    assert shown.parameters is not None
    assert "temperature" in shown.parameters and "num_predict" in shown.parameters
    assert r'stop                           "\n\n"' in shown.parameters  # quoted, as Ollama shows it
    assert "PARAMETER num_predict 12" in shown.modelfile
    preset = client.chat(model="smol-pirate", messages=question)
    # The same request to the source model with the preset's values spelled out.
    spelled = client.chat(
        model="smol",
        messages=[{"role": "system", "content": PIRATE}, *question],
        options={"temperature": 0, "num_predict": 12, "stop": ["\n\n"]},
    )
    assert preset.message.content == spelled.message.content != ""
    assert preset.eval_count == spelled.eval_count <= 12
    with Session(get_engine()) as session:  # the same files, no copy
        made, source = session.get(ModelRecord, "smol-pirate"), session.get(ModelRecord, "smol")
        assert made is not None and source is not None and made.path == source.path


@pytest.mark.parametrize(
    ("fields", "status", "says"),
    [
        ({"from": "smol", "parameters": {"mirostat": 2}}, 400, "'mirostat' cannot be kept"),
        ({"from": "smol", "parameters": {"temperature": 9}}, 400, "temperature"),
        ({"from": "smol", "template": "{{ .System }} {{ .Prompt }}"}, 400, "Go templates"),
        ({"from": "smol", "files": {"model.gguf": "sha256:00"}}, 400, "mlx-manager models add"),
        ({"from": "smol", "quantize": "q4_K_M"}, 400, "models convert"),
        ({"modelfile": "FROM smol"}, 400, "`from`, `system`, `parameters`"),
        ({}, 400, "`from` must name"),
        ({"from": "nope"}, 404, "not found"),
        ({"from": "smol", "model": "minilm"}, 409, "exists"),
    ],
)
def test_create_refuses_what_a_preset_cannot_keep_and_writes_nothing(
    client: ollama.Client, fields: dict[str, object], status: int, says: str
) -> None:
    body = {"model": "made", **fields}
    answer = client._client.post("/api/create", json=body)  # the raw request: every field as sent
    assert answer.status_code == status and says in answer.json()["error"], answer.text
    names = {m.model for m in client.list().models}
    assert names == {"minilm", "smol"}
