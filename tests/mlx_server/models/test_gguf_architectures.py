"""GGUF files of every architecture and tensor type we read, written with llama.cpp's own `gguf`
writer from tiny random mlx-lm models: the import gives back the source model (weights, config,
greedy tokens); types are repacked exactly, requantized or kept float as planned; what we cannot
read is refused with what we can."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import mlx.core as mx
import numpy as np
import pytest
from gguf import GGMLQuantizationType, quants
from mlx.utils import tree_flatten
from mlx_lm import load
from mlx_lm.generate import generate_step

from mlx_server.models.gguf_import import GGUFImportError, convert_gguf, inspect_gguf
from tests.fixtures.tiny_gguf_model import build_tiny_gguf, spm_tokenizer_meta, tokenizer_meta, write_gguf

Q = GGMLQuantizationType


@pytest.fixture(scope="module")
def tokenizer(smollm_gguf: Path) -> dict[str, Any]:
    return tokenizer_meta(smollm_gguf)


def _greedy(model: Any, tokenizer: Any, text: str, count: int = 8) -> list[int]:
    prompt = mx.array(tokenizer.encode(text))
    steps = generate_step(prompt, model, max_tokens=count)
    return [int(token) for token, _ in steps]


@pytest.mark.parametrize("arch", ["qwen3", "gemma3"])
def test_gguf_round_trips_to_the_source_model(tmp_path: Path, tokenizer: dict[str, Any], arch: str) -> None:
    source, gguf = build_tiny_gguf(arch, tmp_path, tokenizer)
    converted = convert_gguf(gguf, tmp_path / "imported", float_dtype=mx.float32)
    original, _ = load(str(source))
    imported, imported_tokenizer = load(str(converted.path))

    expected, got = dict(tree_flatten(original.parameters())), dict(tree_flatten(imported.parameters()))
    assert set(got) == set(expected)
    for name, value in expected.items():  # gemma's norms went through +1 and -1 in float32
        np.testing.assert_allclose(np.array(got[name]), np.array(value), atol=1e-6, err_msg=name)
    source_config = json.loads((source / "config.json").read_text())
    config = json.loads((converted.path / "config.json").read_text())
    for key in ("model_type", "hidden_size", "num_hidden_layers", "head_dim", "num_key_value_heads"):
        assert config[key] == source_config[key], key
    assert _greedy(imported, imported_tokenizer, "The sky is") == _greedy(
        original, imported_tokenizer, "The sky is"
    )


def test_q8_0_and_q4_0_are_repacked_exactly_and_q5_0_is_requantized_to_8_bits(tmp_path: Path) -> None:
    for kind, bits in ((Q.Q8_0, 8), (Q.Q4_0, 4), (Q.Q5_0, 8)):
        _, gguf = build_tiny_gguf("qwen3", tmp_path / kind.name, spm_tokenizer_meta(), quantize=kind)
        info = inspect_gguf(gguf)
        assert set(info.type_counts) == {kind.name, "F32"} and info.source_quantization == kind.name
        out = convert_gguf(gguf, tmp_path / kind.name / "mlx", float_dtype=mx.float32)
        assert json.loads((out.path / "config.json").read_text())["quantization"]["bits"] == bits
        model, _ = load(str(out.path))
        layer = model.model.layers[0].mlp.up_proj
        ours = mx.dequantize(layer.weight, layer.scales, layer.biases, group_size=32, bits=bits)
        expected = _written(gguf, "blk.0.ffn_up.weight")  # decoded by gguf's own reader
        if kind == Q.Q5_0:  # 5-bit values on an 8-bit grid: within one 8-bit step
            np.testing.assert_allclose(np.array(ours), expected, atol=2 * np.abs(expected).max() / 255)
        else:
            np.testing.assert_array_equal(np.array(ours), expected)


def _written(gguf: Path, name: str) -> np.ndarray:
    from gguf import GGUFReader

    tensor = next(t for t in GGUFReader(gguf).tensors if t.name == name)
    return quants.dequantize(np.asarray(tensor.data), tensor.tensor_type)


def test_the_plan_follows_the_choice_and_its_size_is_the_stored_size(tmp_path: Path) -> None:
    _, gguf = build_tiny_gguf("qwen3", tmp_path, spm_tokenizer_meta(), quantize=Q.Q5_0)
    for choice, label in (("4bit", "4-bit"), ("8bit", "8-bit"), ("float", "float")):
        info = inspect_gguf(gguf, choice)
        assert max(info.stored_counts, key=lambda k: info.stored_counts[k]) == label
        out = convert_gguf(gguf, tmp_path / choice, quantization=choice)
        weights = (out.path / "model.safetensors").stat().st_size
        assert abs(weights - info.planned_bytes) < 0.01 * info.planned_bytes + 64 * 1024, choice
    with pytest.raises(GGUFImportError, match="use one of auto, 4bit, 8bit, float"):
        inspect_gguf(gguf, "3bit")


def _gguf_with(tmp_path: Path, arch: str, tensors: dict[str, np.ndarray], **meta: Any) -> Path:
    base = {f"{arch}.block_count": 1, f"{arch}.embedding_length": 32}
    return write_gguf(tmp_path / f"{arch}.gguf", arch, base | meta, tensors)


def test_an_unsupported_architecture_is_refused_naming_it_and_the_supported_ones(tmp_path: Path) -> None:
    gguf = _gguf_with(tmp_path, "mamba", {"token_embd.weight": np.zeros((8, 32), np.float32)})
    models = tmp_path / "models"
    for action in (lambda: inspect_gguf(gguf), lambda: convert_gguf(gguf, models / "mamba")):
        with pytest.raises(
            GGUFImportError, match="'mamba' is not supported; supported: llama, qwen2, qwen3, gemma3"
        ):
            action()
    assert not models.exists()


def test_a_tensor_type_gguf_cannot_read_is_refused_listing_the_readable_ones(tmp_path: Path) -> None:
    from gguf import GGUFWriter

    path = tmp_path / "q8_1.gguf"
    writer = GGUFWriter(str(path), "qwen3")
    writer.add_tensor("token_embd.weight", np.zeros((8, 40), np.uint8), raw_dtype=Q.Q8_1)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    with pytest.raises(
        GGUFImportError, match=r"Q8_1 \(1 tensors\) cannot be read; readable types: F32, F16, BF16"
    ):
        convert_gguf(path, tmp_path / "out")
    assert not (tmp_path / "out").exists()
