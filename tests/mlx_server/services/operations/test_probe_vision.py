"""The probe of a vision model (the tiny random-weight Qwen2.5-VL): detected by its files, the
text steps as for any chat model, then images through its processor and model."""

from __future__ import annotations

import asyncio
import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from mlx_server.database import upgrade_database
from mlx_server.models.detection import ModelType, detect_model_type, read_chat_template, read_config
from mlx_server.models.pool import get_model_pool, reset_model_pool
from mlx_server.services.operations.probe import VISION_STEP_NAMES, probe_model
from mlx_server.services.operations.probe_steps import ProbeStep
from mlx_server.utils.metal import reset_metal_thread
from tests.mlx_server.services.operations.test_probe import _register


@pytest.fixture
def tiny_vl(home: Path, tiny_vision_dir: Path) -> Iterator[str]:
    upgrade_database()
    _register("tiny-vl", tiny_vision_dir)
    yield "tiny-vl"
    reset_model_pool()
    reset_metal_thread()


def test_vision_is_detected_from_vision_config_or_the_image_processor(
    tiny_vision_dir: Path, tmp_path: Path
) -> None:
    assert detect_model_type(tiny_vision_dir) is ModelType.VISION
    assert "<|image_pad|>" in read_chat_template(tiny_vision_dir)  # the processor's template
    stripped = tmp_path / "no-vision-config"
    shutil.copytree(tiny_vision_dir, stripped)
    config = read_config(stripped)
    del config["vision_config"]
    config["architectures"] = ["SomeForConditionalGeneration"]
    (stripped / "config.json").write_text(json.dumps(config))
    assert detect_model_type(stripped) is ModelType.VISION  # preprocessor_config.json says so
    (stripped / "preprocessor_config.json").unlink()
    assert detect_model_type(stripped) is ModelType.TEXT_GEN


def test_probe_passes_images_through_a_vision_model_and_records_it(tiny_vl: str) -> None:
    steps: list[ProbeStep] = []
    capabilities = asyncio.run(probe_model(tiny_vl, on_step=steps.append))

    assert [s.name for s in steps if s.status == "running"] == list(VISION_STEP_NAMES)
    results = {s.name: s for s in steps if s.status != "running"}
    assert results["vision"].status == "ok", results["vision"]
    assert "two images of 56x56 pixels" in results["vision"].detail
    assert capabilities.model_type == "vision" and capabilities.supports_multi_image is True
    assert capabilities.model_family == "qwen"
    assert get_model_pool().get_loaded(tiny_vl) is None
