"""Models the user already has: added where they are (the command line, the models page, the
admin API), used through /v1, then missing once their folder goes; the real SmolLM2,
all-MiniLM-L6-v2 and whisper tiny.en."""

from __future__ import annotations

import shutil
from pathlib import Path

from fastapi.testclient import TestClient
from sqlmodel import Session
from typer.testing import CliRunner

from mlx_manager.cli import app
from mlx_server.database import get_engine, upgrade_database
from mlx_server.models.store import default_embedding_model_dir, get_model
from mlx_server.records import ApiKeyScope, ModelSource
from mlx_server.services.operations.api_keys import create_api_key
from tests.fixtures.disk_models import linked_copy
from tests.support import csrf_headers

runner = CliRunner()
MB = 2**20


def _du(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def _refused_naming(response_text: str, status: int, path: Path) -> bool:
    return status == 409 and str(path) in response_text


def test_smollm_added_in_place_answers_then_shows_missing_when_its_folder_goes(
    client: TestClient, home: Path, smollm_dir: Path, tmp_path: Path
) -> None:
    folder = linked_copy(smollm_dir, tmp_path / "my models" / "SmolLM2")
    before = _du(home)
    added = runner.invoke(app, ["models", "add", str(folder), "--id", "smol-here", "--no-probe"])
    assert added.exit_code == 0, added.output
    assert "registered where it is" in added.output and "nothing was copied" in added.output
    assert _du(home) - before < 1 * MB
    with Session(get_engine()) as session:
        record = get_model(session, "smol-here")
    assert record is not None and record.source == ModelSource.IN_PLACE and Path(record.path) == folder
    chat = {"model": "smol-here", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 3}
    answered = client.post("/v1/chat/completions", json=chat)
    assert answered.status_code == 200 and answered.json()["choices"][0]["message"]["content"]

    shutil.rmtree(folder)  # loaded and all: the next request is refused, and it is unloaded
    refused = client.post("/v1/chat/completions", json=chat)
    assert _refused_naming(refused.text, refused.status_code, folder), refused.text
    assert refused.json()["error"]["code"] == "model_files_missing"
    ollama = client.post("/api/chat", json={**chat, "stream": False})
    assert _refused_naming(ollama.text, ollama.status_code, folder)
    speech = client.post("/v1/audio/speech", json={"model": "smol-here", "input": "Hi", "voice": "a"})
    assert _refused_naming(speech.text, speech.status_code, folder)
    page = client.get("/models")
    assert page.status_code == 200 and 'data-testid="model-missing"' in page.text and str(folder) in page.text
    assert client.get("/models/smol-here").status_code == 200

    client.headers.update(csrf_headers(client))
    removed = client.post("/models/smol-here/delete")
    assert "Removed smol-here from the list; its files stay" in removed.text


def test_minilm_added_in_place_over_the_admin_api_embeds_then_is_refused(
    client: TestClient, home: Path, tmp_path: Path
) -> None:
    folder = linked_copy(default_embedding_model_dir(), tmp_path / "all-MiniLM-L6-v2")
    before = _du(home)
    response = client.post("/v1/admin/models", json={"path": str(folder), "probe": False})
    assert response.status_code == 201, response.text
    added = response.json()
    assert (added["id"], added["source"], added["path"]) == ("all-MiniLM-L6-v2", "in-place", str(folder))
    assert _du(home) - before < 1 * MB
    embedded = client.post("/v1/embeddings", json={"model": "all-MiniLM-L6-v2", "input": "a cat"})
    assert embedded.status_code == 200 and len(embedded.json()["data"][0]["embedding"]) == 384
    again = client.post("/v1/admin/models", json={"path": str(folder), "id": "again"})
    assert again.status_code == 409 and "already registered as 'all-MiniLM-L6-v2'" in again.text

    shutil.rmtree(folder)
    for path, body in (("/v1/embeddings", {"input": "a cat"}), ("/api/embed", {"input": "a cat"})):
        refused = client.post(path, json={"model": "all-MiniLM-L6-v2", **body})
        assert _refused_naming(refused.text, refused.status_code, folder), (path, refused.text)


def test_whisper_added_in_place_from_the_page_transcribes_then_is_refused(
    client: TestClient, home: Path, whisper_dir: Path, fox_clip: Path, tmp_path: Path
) -> None:
    folder = linked_copy(whisper_dir, tmp_path / "whisper")
    client.headers.update(csrf_headers(client))
    before = _du(home)
    page = client.post("/models/add", data={"path": str(folder), "model_id": "whisper-here"})
    assert page.status_code == 200 and "Added whisper-here (registered where it is" in page.text
    assert _du(home) - before < 1 * MB
    audio = {"file": ("fox.wav", fox_clip.read_bytes())}
    heard = client.post("/v1/audio/transcriptions", data={"model": "whisper-here"}, files=audio)
    assert heard.status_code == 200 and "fox" in heard.json()["text"].lower()

    shutil.rmtree(folder)
    refused = client.post("/v1/audio/transcriptions", data={"model": "whisper-here"}, files=audio)
    assert _refused_naming(refused.text, refused.status_code, folder), refused.text


def test_what_cannot_be_added_is_refused_with_the_reason(client: TestClient, tmp_path: Path) -> None:
    pytorch = tmp_path / "pytorch-only"
    pytorch.mkdir()
    (pytorch / "config.json").write_text('{"model_type": "llama"}')
    (pytorch / "pytorch_model.bin").write_bytes(b"\0" * 64)
    refused = client.post("/v1/admin/models", json={"path": str(pytorch)})
    assert refused.status_code == 400 and "PyTorch weights only" in refused.json()["error"]["message"]
    nothing = client.post("/v1/admin/models", json={"path": str(tmp_path / "nope")})
    assert nothing.status_code == 400 and "There is nothing at" in nothing.text
    # A part over the file system's 255 bytes: the fuzzer's 500 (ENAMETOOLONG from Path.is_file).
    too_long = client.post("/v1/admin/models", json={"path": str(tmp_path / ("é" * 200))})
    assert too_long.status_code == 400 and "There is nothing at" in too_long.text
    cli = runner.invoke(app, ["models", "add", str(pytorch)])
    assert cli.exit_code == 1 and "PyTorch weights only" in cli.output


def test_adding_is_an_admin_action(client: TestClient, smollm_dir: Path) -> None:
    upgrade_database()
    with Session(get_engine()) as session:
        key = create_api_key(session, name="app", scope=ApiKeyScope.INFERENCE).secret
    body = {"path": str(smollm_dir), "probe": False}
    refused = client.post("/v1/admin/models", json=body, headers={"Authorization": f"Bearer {key}"})
    assert refused.status_code == 403 and "admin scope" in refused.text


def test_copy_and_gguf_put_the_files_in_the_models_directory(
    home: Path, smollm_dir: Path, smollm_gguf: Path, tmp_path: Path
) -> None:
    folder = linked_copy(smollm_dir, tmp_path / "SmolLM2")
    copied = runner.invoke(app, ["models", "add", str(folder), "--id", "smol-copy", "--copy", "--no-probe"])
    assert copied.exit_code == 0 and "copied into" in copied.output
    assert (home / "models" / "smol-copy" / "model.safetensors").is_file()
    gguf = runner.invoke(app, ["models", "add", str(smollm_gguf), "--id", "smol-gguf", "--no-probe"])
    assert gguf.exit_code == 0 and "converted from GGUF" in gguf.output
    with Session(get_engine()) as session:
        assert [get_model(session, i).source for i in ("smol-copy", "smol-gguf")] == ["local", "gguf-import"]  # type: ignore[union-attr]
