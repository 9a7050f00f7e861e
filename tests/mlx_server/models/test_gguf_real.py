"""The real GGUF files: Qwen2.5-Coder-0.5B-Instruct (qwen2; Q5_0, Q8_0, Q4_K, Q6_K tensors) and
SmolLM2-135M (llama; Q4_1, Q8_0). What the inspection promises is what the import stores, and
our tokenizer rebuild tokenizes like transformers' own GGUF conversion."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import mlx.core as mx
import numpy as np
import pytest
from tokenizers import Tokenizer
from transformers.integrations.gguf.gguf_tokenizer_mapping import (
    GGUF_TOKENIZER_MAPPING,
    convert_gguf_tokenizer,
)

from mlx_server.models.gguf_file import open_gguf
from mlx_server.models.gguf_import import inspect_gguf

# ASCII, accents, CJK, emoji, code with whitespace runs, special tokens, mixed scripts. No digits:
# SmolLM2 splits every digit (its tokenizer.json's Digits pre-tokenizer, which we rebuild from
# tokenizer.ggml.pre = "smollm" and test_gguf_import checks), a step transformers' GGUF
# conversion does not know; Qwen's own split (single digits) is in both, checked apart.
STRINGS = [
    "Hello, world! The quick brown fox jumps over the lazy dog.",
    "Café, naïve façade, São Paulo, Zürich, Ångström, déjà vu",
    "東京は日本の首都です。北京欢迎你！서울",
    "Party 🎉🚀 time 👍🏽 and a family 👨‍👩‍👧",
    "def f(x):\n    return  x  *  y\n\n\n\tif x:\t\tpass   \n",
    "<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n",
    "Привет мир, Γειά σου κόσμε, مرحبا بالعالم",
]


@pytest.fixture(scope="module")
def qwen_file(qwen_gguf: Path) -> tuple[Any, dict[str, Any]]:
    """The Qwen GGUF opened once for this module (its 152k-token vocabulary takes seconds)."""
    return open_gguf(qwen_gguf)


def _transformers_tokenizer(meta: dict[str, Any]) -> Tokenizer:
    """transformers' GGUF tokenizer conversion, from the same metadata."""
    tokenizer = {
        name: meta[f"tokenizer.{key}"]
        for key, name in GGUF_TOKENIZER_MAPPING["tokenizer"].items()
        if f"tokenizer.{key}" in meta
    }
    backend, _ = convert_gguf_tokenizer(meta["general.architecture"], tokenizer)
    return backend


@pytest.mark.parametrize("model", ["smollm", "qwen"])
def test_our_tokenizer_encodes_like_transformers_gguf_conversion(
    model: str, request: pytest.FixtureRequest
) -> None:
    model_dir: Path = request.getfixturevalue(f"{model}_dir")
    if model == "qwen":
        _, meta = request.getfixturevalue("qwen_file")
    else:
        _, meta = open_gguf(request.getfixturevalue("smollm_gguf"))
    theirs = _transformers_tokenizer(meta)
    ours = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    for text in STRINGS + (["Room 2048, floor 7: π ≈ 3.14159"] if model == "qwen" else []):
        ids = ours.encode(text, add_special_tokens=False).ids
        assert ids == theirs.encode(text, add_special_tokens=False).ids, text
        assert ours.decode(ids, skip_special_tokens=False) == text
    special = ours.encode("<|im_end|>", add_special_tokens=False).ids
    assert len(special) == 1  # stays whole


def test_the_qwen_inspection_is_what_the_import_stores(qwen_gguf: Path, qwen_dir: Path) -> None:
    info = inspect_gguf(qwen_gguf)
    assert (info.architecture, info.source_quantization) == ("qwen2", "Q4_K_M")
    counts = {kind: tensors for kind, (tensors, _) in info.type_counts.items()}
    assert counts == {"Q5_0": 133, "Q8_0": 13, "Q6_K": 12, "Q4_K": 12, "F32": 121}
    assert info.parameters == 630_167_424
    # auto: Q4_K stays 4-bit, Q5_0/Q6_K/Q8_0 go to 8-bit (no precision lost), norms and biases float
    assert info.stored_counts == {"4-bit": 52_297_728, "8-bit": 577_798_144, "float": 71_552}
    weights = (qwen_dir / "model.safetensors").stat().st_size
    assert abs(weights - info.planned_bytes) < 0.01 * info.planned_bytes

    config = json.loads((qwen_dir / "config.json").read_text())
    assert config["model_type"] == "qwen2" and config["tie_word_embeddings"] is False
    assert config["quantization"]["bits"] == 8
    four_bit = [m for m, v in config["quantization"].items() if isinstance(v, dict) and v["bits"] == 4]
    assert len(four_bit) == 12
    assert config["eos_token_id"] == 151645  # <|im_end|>
    template = json.loads((qwen_dir / "tokenizer_config.json").read_text())["chat_template"]
    assert "<tool_call>" in template


def test_q8_0_tensors_of_the_qwen_file_are_stored_exactly(qwen_file: tuple[Any, Any], qwen_dir: Path) -> None:
    from gguf import quants

    reader, _ = qwen_file
    tensor = next(t for t in reader.tensors if t.name == "blk.0.attn_v.weight")
    assert tensor.tensor_type.name == "Q8_0"
    stored = mx.load(str(qwen_dir / "model.safetensors"))
    prefix = "model.layers.0.self_attn.v_proj"
    ours = mx.dequantize(
        stored[f"{prefix}.weight"], stored[f"{prefix}.scales"], stored[f"{prefix}.biases"], 32, 8
    )
    expected = quants.dequantize(np.asarray(tensor.data), tensor.tensor_type)
    np.testing.assert_array_equal(np.array(ours), expected)
