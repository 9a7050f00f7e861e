"""LoRA adapters: registered over SmolLM2 through the admin API, served as "smol+<name>" (listed
in /v1/models, loaded by the pool as one entry), changing greedy output; unloading frees their
memory; adapters that do not fit the base are refused with a 400 saying why."""

from __future__ import annotations

import json
from pathlib import Path

import mlx.core as mx
import pytest
from fastapi.testclient import TestClient
from mlx.utils import tree_flatten
from mlx_lm.tuner.utils import linear_to_lora_layers
from mlx_lm.utils import load_model

from tests.mlx_server.api.conftest import standalone_server

ADAPTERS = "/v1/admin/lora-adapters"
HELLO = {"role": "user", "content": "Name a color."}


def write_adapter(directory: Path, base: Path, *, rank: int = 8, layers: int = 4) -> Path:
    """A random LoRA adapter for `base` in mlx-lm's format: the shapes mlx-lm gives its LoRA
    layers, with lora_b drawn large enough to move greedy decoding."""
    model, _ = load_model(base, lazy=True)
    parameters = {"rank": rank, "scale": 20.0, "dropout": 0.0}
    linear_to_lora_layers(model, layers, parameters)
    mx.random.seed(0)
    weights = {
        name: mx.random.normal(value.shape) * (0.05 if name.endswith("lora_b") else 0.1)
        for name, value in tree_flatten(model.parameters())
        if name.endswith(("lora_a", "lora_b"))
    }
    directory.mkdir(parents=True)
    mx.save_safetensors(str(directory / "adapters.safetensors"), weights)
    config = {"fine_tune_type": "lora", "num_layers": layers, "lora_parameters": parameters}
    (directory / "adapter_config.json").write_text(json.dumps(config))
    return directory


@pytest.fixture(scope="module")
def adapter(smollm_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_adapter(tmp_path_factory.mktemp("lora") / "noisy", smollm_dir)


def greedy(client: TestClient, model: str) -> str:
    body = {"model": model, "messages": [HELLO], "max_tokens": 4}
    response = client.post("/v1/chat/completions", json={**body, "temperature": 0})
    assert response.status_code == 200, response.text
    content: str = response.json()["choices"][0]["message"]["content"]
    return content


def test_an_adapter_changes_greedy_output_and_unloading_frees_it(
    smollm_dir: Path, adapter: Path, tmp_path: Path
) -> None:
    with standalone_server({"smol": smollm_dir}) as client:
        base_reply = greedy(client, "smol")
        created = client.post(ADAPTERS, json={"base_model": "smol", "name": "noisy", "path": str(adapter)})
        assert created.status_code == 201, created.text
        assert created.json()["id"] == "smol+noisy" and created.json()["loaded"] is False
        assert "smol+noisy" in [m["id"] for m in client.get("/v1/models").json()["data"]]
        assert client.get("/v1/models/smol+noisy").json()["owned_by"] == "lora"

        before = mx.get_active_memory()
        assert greedy(client, "smol+noisy") != base_reply
        pool = client.get("/v1/admin/pool").json()
        entries = {m["id"]: m for m in pool["models"]}
        assert entries["smol+noisy"]["size_bytes"] >= entries["smol"]["size_bytes"]
        assert client.get(ADAPTERS).json()["data"][0]["loaded"] is True
        unloaded = client.post("/v1/admin/models/smol+noisy/unload")
        assert unloaded.status_code == 200, unloaded.text
        after = mx.get_active_memory()
        assert abs(after - before) <= 0.1 * before, (before, after)

        removed = client.delete(f"{ADAPTERS}/smol+noisy")
        assert removed.status_code == 200 and removed.json()["deleted"] is True
        assert "smol+noisy" not in [m["id"] for m in client.get("/v1/models").json()["data"]]
        gone = client.post("/v1/chat/completions", json={"model": "smol+noisy", "messages": [HELLO]})
        assert gone.status_code == 404


def test_adapters_that_do_not_fit_are_refused(smollm_dir: Path, adapter: Path, tmp_path: Path) -> None:
    wrong = tmp_path / "wrong"
    wrong.mkdir()
    weights = mx.load(str(adapter / "adapters.safetensors"))
    name = next(n for n in weights if n.endswith("lora_a"))
    weights[name] = mx.zeros((weights[name].shape[0] + 1, weights[name].shape[1]))
    mx.save_safetensors(str(wrong / "adapters.safetensors"), weights)
    (wrong / "adapter_config.json").write_text((adapter / "adapter_config.json").read_text())
    with standalone_server({"smol": smollm_dir}) as client:

        def register(**body: str) -> tuple[int, dict[str, str]]:
            response = client.post(
                ADAPTERS, json={"base_model": "smol", "name": "a", "path": str(adapter), **body}
            )
            return response.status_code, response.json().get("error", {})

        status, error = register(path=str(wrong))
        assert status == 400 and error["param"] == "path"
        assert name in error["message"] and "does not match" in error["message"]
        status, error = register(path=str(tmp_path))
        assert status == 400 and "lacks adapter_config.json and adapters.safetensors" in error["message"]
        status, error = register(path=str(tmp_path / ("é" * 200)))  # a name no directory can have
        assert status == 400 and "is not a directory on the server" in error["message"]
        status, error = register(base_model="nope")
        assert status == 404 and error["param"] == "base_model"
        status, error = register(name="no/slash")
        assert status == 400 and error["param"] == "name"
        assert register()[0] == 201
        status, error = register()
        assert status == 409 and "exists already" in error["message"]
        assert client.get(ADAPTERS).json()["data"][0]["id"] == "smol+a"
