"""Text models on a CPU with OpenBLAS: loaded as float32, counted at their float32 size, and
left as stored when the setting says so."""

from __future__ import annotations

from pathlib import Path

import mlx.core as mx
import mlx.nn as nn
import pytest

from mlx_server.config import reset_settings
from mlx_server.models.cpu_weights import load_text_model, loaded_bytes_estimate
from mlx_server.models.detection import read_config
from mlx_server.utils.cpu_blas import fast_cpu_blas
from mlx_server.utils.memory import active_memory_bytes

pytestmark = pytest.mark.skipif(
    fast_cpu_blas() is None or mx.default_device() != mx.cpu,
    reason="needs MLX's CPU backend with OpenBLAS (Debian: libopenblas0-pthread)",
)


def _quantized_layers(model: nn.Module) -> int:
    return sum(isinstance(m, nn.QuantizedLinear | nn.QuantizedEmbedding) for _, m in model.named_modules())


def test_smollm2_loads_as_float32_and_the_estimate_is_what_the_load_takes(smollm_dir: Path) -> None:
    before = active_memory_bytes()
    model, _ = load_text_model(str(smollm_dir))
    taken = active_memory_bytes() - before
    assert _quantized_layers(model) == 0
    assert {v.dtype for _, v in nn.utils.tree_flatten(model.parameters())} == {mx.float32}
    files = sum(f.stat().st_size for f in smollm_dir.glob("*.safetensors"))
    estimate = loaded_bytes_estimate(smollm_dir, read_config(smollm_dir))
    assert estimate > 3 * files  # 4-bit weights (and 8-bit embeddings) grown to 32 bits
    assert taken == pytest.approx(estimate, rel=0.01)


def test_a_zero_limit_keeps_the_model_as_stored(smollm_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MLX_SERVER_CPU_FLOAT_WEIGHTS_MAX_MB", "0")
    reset_settings()
    try:
        model, _ = load_text_model(str(smollm_dir))
        assert _quantized_layers(model) > 0
        files = sum(f.stat().st_size for f in smollm_dir.glob("*.safetensors"))
        assert loaded_bytes_estimate(smollm_dir, read_config(smollm_dir)) == files
    finally:
        monkeypatch.delenv("MLX_SERVER_CPU_FLOAT_WEIGHTS_MAX_MB")
        reset_settings()
