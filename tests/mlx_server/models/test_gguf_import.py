"""GGUF → MLX conversion, on the real SmolLM2 file and on small GGUF files we write."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import mlx.core as mx
import numpy as np
import pytest
from mlx.utils import tree_flatten
from mlx_lm import generate, load
from mlx_lm.sample_utils import make_sampler
from tokenizers import Tokenizer

from mlx_server.models.gguf_import import GGUFImportError, convert_gguf
from tests.support import copy_truncated, write_tiny_llama_gguf

SPM_TOKENS = ["<unk>", "<s>", "</s>", "▁", "a", "b", "c", "▁a", "ab", "▁ab", "▁c"]
SPM_SCORES = [0.0, 0.0, 0.0, -1.0, -2.0, -2.0, -2.0, -1.5, -1.2, -0.5, -0.8]


def _tiny_llama_meta(tokens: list[str]) -> dict[str, Any]:
    u32 = mx.uint32
    return {
        "general.architecture": "llama",
        "general.name": "tiny-test-llama",
        "llama.embedding_length": mx.array(64, dtype=u32),
        "llama.block_count": mx.array(2, dtype=u32),
        "llama.feed_forward_length": mx.array(96, dtype=u32),
        "llama.attention.head_count": mx.array(4, dtype=u32),
        "llama.attention.head_count_kv": mx.array(2, dtype=u32),
        "llama.attention.layer_norm_rms_epsilon": mx.array(1e-5, dtype=mx.float32),
        "llama.rope.freq_base": mx.array(10000.0, dtype=mx.float32),
        "llama.context_length": mx.array(128, dtype=u32),
        "tokenizer.ggml.model": "llama",
        "tokenizer.ggml.tokens": tokens,
        "tokenizer.ggml.scores": mx.array(SPM_SCORES, dtype=mx.float32),
        "tokenizer.ggml.token_type": mx.array([2, 3, 3] + [1] * (len(tokens) - 3), dtype=mx.int32),
        "tokenizer.ggml.unknown_token_id": mx.array(0, dtype=u32),
        "tokenizer.ggml.bos_token_id": mx.array(1, dtype=u32),
        "tokenizer.ggml.eos_token_id": mx.array(2, dtype=u32),
    }


def _tiny_llama_weights(vocab: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    hidden, ff, kv_rows = 64, 96, 2 * 16

    def w(*shape: int) -> np.ndarray:
        return rng.standard_normal(shape).astype(np.float32) * 0.05

    weights = {
        "model.embed_tokens.weight": w(vocab, hidden),
        "model.norm.weight": np.ones(hidden, np.float32),
    }
    for layer in range(2):
        prefix = f"model.layers.{layer}"
        weights |= {
            f"{prefix}.self_attn.q_proj.weight": w(hidden, hidden),
            f"{prefix}.self_attn.k_proj.weight": w(kv_rows, hidden),
            f"{prefix}.self_attn.v_proj.weight": w(kv_rows, hidden),
            f"{prefix}.self_attn.o_proj.weight": w(hidden, hidden),
            f"{prefix}.mlp.gate_proj.weight": w(ff, hidden),
            f"{prefix}.mlp.up_proj.weight": w(ff, hidden),
            f"{prefix}.mlp.down_proj.weight": w(hidden, ff),
            f"{prefix}.input_layernorm.weight": np.ones(hidden, np.float32),
            f"{prefix}.post_attention_layernorm.weight": np.ones(hidden, np.float32),
        }
    return weights


def test_smollm2_config_keeps_4bit_layers_and_8bit_embedding(smollm_dir: Path) -> None:
    config = json.loads((smollm_dir / "config.json").read_text())
    assert config["model_type"] == "llama"
    assert config["tie_word_embeddings"] is True
    assert config["quantization"]["bits"] == 4
    assert config["quantization"]["group_size"] == 32
    assert config["quantization"]["model.embed_tokens"]["bits"] == 8
    assert config["eos_token_id"] == 2


def test_smollm2_tokenizer_splits_digits_and_round_trips(smollm: tuple[Any, Any]) -> None:
    _, tokenizer = smollm
    ids = tokenizer.encode("Room 2048, floor 7")
    pieces = [tokenizer.decode([i]) for i in ids]
    assert {"2", "0", "4", "8"} <= set(pieces)
    assert tokenizer.decode(ids) == "Room 2048, floor 7"
    assert tokenizer.encode("<|im_end|>") == [2]  # special tokens stay whole


def test_smollm2_chat_template_comes_from_the_gguf(smollm: tuple[Any, Any]) -> None:
    _, tokenizer = smollm
    prompt = tokenizer.apply_chat_template(
        [{"role": "user", "content": "Hi"}], add_generation_prompt=True, tokenize=False
    )
    assert prompt.endswith("<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n")


def test_imported_smollm2_answers_paris_greedily(smollm: tuple[Any, Any]) -> None:
    model, tokenizer = smollm
    messages = [{"role": "user", "content": "What is the capital of France?"}]
    prompt = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    text = generate(model, tokenizer, prompt, max_tokens=16, sampler=make_sampler(temp=0.0))
    assert "Paris" in text


def test_float_gguf_round_trips_weights_and_undoes_rope_permutation(tmp_path: Path) -> None:
    hf = _tiny_llama_weights(len(SPM_TOKENS))
    gguf = write_tiny_llama_gguf(tmp_path / "tiny.gguf", hf, _tiny_llama_meta(SPM_TOKENS))
    out = convert_gguf(gguf, tmp_path / "tiny", float_dtype=mx.float32)

    model, _ = load(str(out.path))
    params = dict(tree_flatten(model.parameters()))
    for name in ("model.layers.0.self_attn.q_proj.weight", "model.layers.1.self_attn.k_proj.weight"):
        np.testing.assert_array_equal(np.array(params[name]), hf[name])
    config = json.loads((out.path / "config.json").read_text())
    assert "quantization" not in config
    assert config["num_key_value_heads"] == 2


def test_sentencepiece_gguf_tokenizer_uses_scores_as_merges(tmp_path: Path) -> None:
    gguf = write_tiny_llama_gguf(
        tmp_path / "tiny.gguf", _tiny_llama_weights(len(SPM_TOKENS)), _tiny_llama_meta(SPM_TOKENS)
    )
    out = convert_gguf(gguf, tmp_path / "tiny", float_dtype=mx.float32)
    tokenizer = Tokenizer.from_file(str(out.path / "tokenizer.json"))
    encoding = tokenizer.encode("ab c")
    assert encoding.tokens == ["<s>", "▁ab", "▁c"]
    assert tokenizer.decode(encoding.ids, skip_special_tokens=True) == "ab c"


@pytest.mark.parametrize("size", [0, 20, 4096, 5_000_000])
def test_truncated_gguf_is_rejected_without_leftovers(tmp_path: Path, smollm_gguf: Path, size: int) -> None:
    broken = copy_truncated(smollm_gguf, tmp_path / "broken.gguf", size)
    models = tmp_path / "models"
    models.mkdir()
    with pytest.raises(GGUFImportError, match="not a readable GGUF file"):
        convert_gguf(broken, models / "broken")
    assert list(models.iterdir()) == []


def test_missing_file_is_reported(tmp_path: Path) -> None:
    with pytest.raises(GGUFImportError, match="no such file"):
        convert_gguf(tmp_path / "nope.gguf", tmp_path / "out")
