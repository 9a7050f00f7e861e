"""whisper tiny.en from CTranslate2's model.bin into mlx-audio's layout: every weight copied exactly."""

from __future__ import annotations

from pathlib import Path

import mlx.core as mx
import numpy as np
import pytest
from mlx.utils import tree_flatten
from mlx_audio.stt.models.whisper.whisper import Model, ModelDimensions, sinusoids
from safetensors.numpy import load_file
from sqlmodel import Session
from typer.testing import CliRunner

from mlx_manager.cli import app
from mlx_server.models.store import default_whisper_dir, list_models
from mlx_server.models.whisper_import import WhisperImportError, convert_ctranslate2_whisper, read_ctranslate2
from tests.support import copy_truncated


@pytest.fixture(scope="module")
def ct2() -> dict[str, np.ndarray]:
    spec, variables = read_ctranslate2(default_whisper_dir() / "model.bin")
    assert spec == "WhisperSpec"
    return variables


@pytest.fixture(scope="module")
def converted(whisper_dir: Path) -> Path:
    return whisper_dir


def test_every_parameter_of_mlx_audios_whisper_is_written_with_its_shape(converted: Path) -> None:
    import json

    model = Model(ModelDimensions.from_dict(json.loads((converted / "config.json").read_text())))
    expected = {name: tuple(value.shape) for name, value in tree_flatten(model.parameters())}
    weights = load_file(str(converted / "model.safetensors"))
    assert {name: tuple(value.shape) for name, value in weights.items()} == expected
    assert {str(w.dtype) for w in weights.values()} == {"float16"}


def test_the_weights_are_ctranslate2s_values_bit_for_bit(converted: Path, ct2: dict[str, np.ndarray]) -> None:
    weights = load_file(str(converted / "model.safetensors"))
    for side in ("encoder", "decoder"):
        for layer in range(4):
            ours, theirs = f"{side}.blocks.{layer}", f"{side}/layer_{layer}"
            fused = np.concatenate([weights[f"{ours}.attn.{m}.weight"] for m in ("query", "key", "value")])
            assert np.array_equal(fused, ct2[f"{theirs}/self_attention/linear_0/weight"])
            bias = ct2[f"{theirs}/self_attention/linear_0/bias"]
            assert np.array_equal(bias[:384], weights[f"{ours}.attn.query.bias"])
            assert not bias[384:768].any()  # the key has no bias in Whisper
            assert np.array_equal(bias[768:], weights[f"{ours}.attn.value.bias"])
            assert np.array_equal(weights[f"{ours}.mlp2.weight"], ct2[f"{theirs}/ffn/linear_1/weight"])
            assert np.array_equal(weights[f"{ours}.mlp_ln.weight"], ct2[f"{theirs}/ffn/layer_norm/gamma"])
    assert np.array_equal(
        weights["decoder.blocks.2.cross_attn.value.weight"],
        ct2["decoder/layer_2/attention/linear_1/weight"][384:],
    )
    assert np.array_equal(weights["encoder.conv1.weight"], ct2["encoder/conv1/weight"].transpose(0, 2, 1))
    assert np.array_equal(weights["decoder.token_embedding.weight"], ct2["decoder/embeddings/weight"])
    assert np.array_equal(
        weights["decoder.positional_embedding"], ct2["decoder/position_encodings/encodings"]
    )


def test_the_encoder_positions_mlx_audio_computes_are_the_ones_ctranslate2_stored(
    ct2: dict[str, np.ndarray],
) -> None:
    computed = np.array(sinusoids(1500, 384).astype(mx.float16))
    assert (
        np.abs(
            computed.astype(np.float32) - ct2["encoder/position_encodings/encodings"].astype(np.float32)
        ).max()
        < 2e-3
    )


def test_the_tokenizer_gains_the_timestamp_tokens_mlx_audio_looks_up(converted: Path) -> None:
    from transformers import WhisperProcessor

    tokenizer = WhisperProcessor.from_pretrained(str(converted)).tokenizer
    assert tokenizer.convert_tokens_to_ids("<|0.00|>") == 50363
    assert tokenizer.convert_tokens_to_ids("<|30.00|>") == 51863
    assert (
        tokenizer.decode(tokenizer.encode(" The quick brown fox", add_special_tokens=False))
        == " The quick brown fox"
    )


def test_a_truncated_model_bin_is_refused_and_nothing_is_left(tmp_path: Path) -> None:
    source = tmp_path / "broken"
    source.mkdir()
    (source / "tokenizer.json").write_bytes((default_whisper_dir() / "tokenizer.json").read_bytes())
    copy_truncated(default_whisper_dir() / "model.bin", source / "model.bin", 1_000_000)
    with pytest.raises(WhisperImportError, match="not a readable CTranslate2 model"):
        convert_ctranslate2_whisper(source, tmp_path / "out" / "whisper")
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def test_the_cli_imports_the_bundled_model_then_refuses_a_second_time(session: Session, home: Path) -> None:
    runner = CliRunner()
    result = runner.invoke(app, ["models", "import-whisper"])
    assert result.exit_code == 0, result.output
    assert "imported whisper-tiny.en" in result.output
    assert [m.id for m in list_models(session)] == ["whisper-tiny.en"]
    again = runner.invoke(app, ["models", "import-whisper"])
    assert again.exit_code == 1 and "already exists" in again.output
