"""Probing the real all-MiniLM-L6-v2: type, dimensions, max tokens and pooling stored; pool clean."""

from __future__ import annotations

import asyncio
import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlmodel import Session

from mlx_server.database import get_engine, upgrade_database
from mlx_server.models.detection import ModelType, detect_model_type
from mlx_server.models.pool import get_model_pool, reset_model_pool
from mlx_server.models.store import default_embedding_model_dir
from mlx_server.records import ModelCapabilities, ModelRecord, ModelSource
from mlx_server.services.operations.probe import probe_model
from mlx_server.services.operations.probe_embeddings import EMBEDDING_STEP_NAMES
from mlx_server.services.operations.probe_steps import ProbeStep
from mlx_server.utils.metal import reset_metal_thread


@pytest.fixture
def minilm(home: Path) -> Iterator[str]:
    upgrade_database()
    with Session(get_engine()) as session:
        path = str(default_embedding_model_dir())
        session.add(ModelRecord(id="minilm", source=ModelSource.LOCAL, path=path))
        session.commit()
    yield "minilm"
    reset_model_pool()
    reset_metal_thread()


def test_probe_records_type_dimensions_max_tokens_and_pooling_then_unloads(minilm: str) -> None:
    steps: list[ProbeStep] = []
    capabilities = asyncio.run(probe_model(minilm, on_step=steps.append))
    assert [s.name for s in steps if s.status == "running"] == list(EMBEDDING_STEP_NAMES)
    results = {s.name: s for s in steps if s.status != "running"}
    assert results["detect"].detail == "type embeddings, family default"
    assert results["embed"].status == "ok"
    assert results["embed"].detail.startswith("384 dimensions, mean pooling, normalized, up to 256 tokens")
    assert results["unload"].detail == "unloaded" and get_model_pool().status()["models"] == []
    with Session(get_engine()) as session:
        stored = session.get(ModelCapabilities, minilm)
    assert stored is not None
    assert (stored.model_type, stored.embedding_dimensions, stored.max_sequence_length) == (
        ModelType.EMBEDDINGS,
        384,
        256,
    )
    assert (stored.embedding_pooling, stored.is_normalized) == ("mean", True)
    assert capabilities.tool_parser_id is None and capabilities.practical_max_tokens is None


def test_a_pinned_embedding_model_stays_loaded_after_its_probe(minilm: str) -> None:
    async def main() -> None:
        await get_model_pool().preload(minilm, pin=True)
        await probe_model(minilm)

    asyncio.run(main())
    loaded = get_model_pool().get_loaded(minilm)
    assert loaded is not None and loaded.pinned and loaded.probed and loaded.adapter is None


def test_type_detection_reads_modules_json_or_the_architecture(tmp_path: Path) -> None:
    source = default_embedding_model_dir()
    sentence_transformers = tmp_path / "st"
    sentence_transformers.mkdir()
    shutil.copy(source / "modules.json", sentence_transformers)
    assert (
        detect_model_type(sentence_transformers, {"architectures": ["SomethingNew"]}) is ModelType.EMBEDDINGS
    )
    plain = tmp_path / "plain"
    plain.mkdir()
    config = json.loads((source / "config.json").read_text())
    assert detect_model_type(plain, config) is ModelType.EMBEDDINGS  # BertModel
    assert detect_model_type(plain, {"architectures": ["LlamaForCausalLM"]}) is ModelType.TEXT_GEN
