"""The embeddings service with the real all-MiniLM-L6-v2: vectors checked against a numpy BERT
computed from the same safetensors, input forms, length limits, pooling and Matryoshka cuts."""

from __future__ import annotations

import math
import re
from dataclasses import replace
from pathlib import Path
from typing import Any

import mlx.core as mx
import numpy as np
import pytest
from safetensors.numpy import load_file
from tokenizers import Tokenizer

from mlx_server.errors import APIError
from mlx_server.models.detection import ModelType, detect_model_type, read_config
from mlx_server.models.embedding_profile import EmbeddingProfile
from mlx_server.models.loaders import LOADERS, LoadedModel, ModelSpec
from mlx_server.models.store import default_embedding_model_dir
from mlx_server.services.pipeline.embeddings import (
    MAX_INPUTS,
    embed_batch,
    input_list,
    output_dimensions,
    tokenize,
)

SENTENCES = [
    "A cat sits on the mat",
    "A kitten is resting on a rug",
    "Stock markets fell sharply today after the central bank raised interest rates again",
]


@pytest.fixture(scope="module")
def minilm_dir() -> Path:
    return default_embedding_model_dir()


@pytest.fixture(scope="module")
def minilm(minilm_dir: Path) -> LoadedModel:
    config = read_config(minilm_dir)
    spec = ModelSpec(
        model_id="minilm",
        path=minilm_dir,
        model_type=ModelType.EMBEDDINGS,
        family="default",
        capabilities=None,
        config=config,
        estimate_bytes=(minilm_dir / "model.safetensors").stat().st_size,
    )
    return LOADERS[ModelType.EMBEDDINGS](spec)


def _embed(loaded: LoadedModel, items: list[Any], *, truncate: bool = False) -> np.ndarray:
    assert loaded.embedding is not None
    return embed_batch(loaded, tokenize(loaded, items, truncate=truncate), loaded.embedding.dimensions)


def _tokenizer(model_dir: Path) -> Tokenizer:
    """The model's tokenizer.json read by `tokenizers` itself, without its padding to 128."""
    tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    tokenizer.no_padding()
    tokenizer.no_truncation()
    return tokenizer


def _layer_norm(x: np.ndarray, w: dict[str, np.ndarray], name: str) -> np.ndarray:
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + 1e-12) * w[f"{name}.weight"] + w[f"{name}.bias"]


def _dense(x: np.ndarray, w: dict[str, np.ndarray], name: str) -> np.ndarray:
    return x @ w[f"{name}.weight"].T + w[f"{name}.bias"]


def _numpy_minilm(model_dir: Path, text: str) -> np.ndarray:
    """BERT forward in float64 numpy from the safetensors, then mean pooling and L2 norm."""
    w = {k: v.astype(np.float64) for k, v in load_file(str(model_dir / "model.safetensors")).items()}
    ids = _tokenizer(model_dir).encode(text).ids
    x = (
        w["embeddings.word_embeddings.weight"][ids]
        + w["embeddings.position_embeddings.weight"][: len(ids)]
        + w["embeddings.token_type_embeddings.weight"][0]
    )
    x = _layer_norm(x, w, "embeddings.LayerNorm")
    heads, size = 12, x.shape[-1] // 12
    erf = np.vectorize(math.erf)
    for layer in range(6):
        p = f"encoder.layer.{layer}"
        q, k, v = (
            _dense(x, w, f"{p}.attention.self.{n}").reshape(len(ids), heads, size).transpose(1, 0, 2)
            for n in ("query", "key", "value")
        )
        scores = q @ k.transpose(0, 2, 1) / math.sqrt(size)
        attn = np.exp(scores - scores.max(-1, keepdims=True))
        context = (attn / attn.sum(-1, keepdims=True)) @ v
        context = context.transpose(1, 0, 2).reshape(len(ids), -1)
        x = _layer_norm(
            _dense(context, w, f"{p}.attention.output.dense") + x, w, f"{p}.attention.output.LayerNorm"
        )
        hidden = _dense(x, w, f"{p}.intermediate.dense")
        hidden = 0.5 * hidden * (1 + erf(hidden / math.sqrt(2)))  # exact GELU, as BERT uses
        x = _layer_norm(_dense(hidden, w, f"{p}.output.dense") + x, w, f"{p}.output.LayerNorm")
    pooled = x.mean(axis=0)
    return pooled / np.linalg.norm(pooled)


def test_profile_follows_the_sentence_transformers_files(minilm_dir: Path, minilm: LoadedModel) -> None:
    assert detect_model_type(minilm_dir) is ModelType.EMBEDDINGS
    assert minilm.embedding == EmbeddingProfile(
        dimensions=384, max_tokens=256, pooling="mean", normalize=True, matryoshka=False
    )
    assert minilm.size_bytes > 80 * 2**20
    assert {v.dtype for _, v in _flat(minilm.model.parameters())} == {mx.float32}


def _flat(tree: Any) -> list[tuple[str, mx.array]]:
    from mlx.utils import tree_flatten

    return list(tree_flatten(tree))


def test_padded_batch_matches_a_numpy_bert_reference(minilm_dir: Path, minilm: LoadedModel) -> None:
    vectors = _embed(minilm, SENTENCES)  # three lengths: the shorter two are padded
    for sentence, vector in zip(SENTENCES, vectors, strict=True):
        reference = _numpy_minilm(minilm_dir, sentence)
        assert float(vector @ reference) >= 0.999
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)


def test_a_text_embeds_the_same_alone_and_in_a_padded_batch(minilm: LoadedModel) -> None:
    alone = _embed(minilm, [SENTENCES[0]])[0]
    batched = _embed(minilm, [SENTENCES[2], SENTENCES[0]])[1]
    assert float(alone @ batched) > 0.99999


def test_similar_sentences_are_closer_than_unrelated_ones(minilm: LoadedModel) -> None:
    cat, kitten, stocks = _embed(minilm, SENTENCES)
    assert float(cat @ kitten) > float(cat @ stocks) + 0.3


def test_token_ids_are_wrapped_in_the_models_special_tokens_like_text(
    minilm_dir: Path, minilm: LoadedModel
) -> None:
    plain = _tokenizer(minilm_dir).encode(SENTENCES[0], add_special_tokens=False)
    rows = tokenize(minilm, [SENTENCES[0], plain.ids], truncate=False)
    assert rows[0] == rows[1] and rows[0][0] == 101 and rows[0][-1] == 102  # [CLS] ... [SEP]
    by_text, by_ids = _embed(minilm, [SENTENCES[0], plain.ids])
    # Identical rows of one batch may differ in the last bits (AVX2 BLAS kernels tile rows apart).
    assert float(by_text @ by_ids) > 0.99999


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("one", ["one"]),
        (["one", "two"], ["one", "two"]),
        ([7592, 2088], [[7592, 2088]]),
        ([[7592], [2088, 999]], [[7592], [2088, 999]]),
    ],
)
def test_the_four_openai_input_forms_become_a_list(value: Any, expected: list[Any]) -> None:
    assert input_list(value) == expected


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ([], "input is an empty list"),
        ("", "input[0] is empty"),
        (["fine", ""], "input[1] is empty"),
        ([[1, 2], []], "input[1] is empty"),
        (["x"] * (MAX_INPUTS + 1), f"at most {MAX_INPUTS} are accepted"),
    ],
)
def test_empty_inputs_and_too_many_inputs_are_refused(value: Any, message: str) -> None:
    with pytest.raises(APIError, match=re.escape(message)) as caught:
        input_list(value)
    assert caught.value.status == 400 and caught.value.param == "input"


def test_too_long_input_is_refused_by_index_unless_truncation_is_asked(minilm: LoadedModel) -> None:
    long_text = "word " * 300
    with pytest.raises(APIError, match=r"input\[1\] is 302 tokens; 'minilm' takes at most 256") as caught:
        tokenize(minilm, ["short", long_text], truncate=False)
    assert caught.value.code == "input_too_long"
    rows = tokenize(minilm, ["short", long_text, list(range(1000, 1400))], truncate=True)
    assert [len(r) for r in rows[1:]] == [256, 256]
    assert rows[1][-1] == 102 and rows[2][:2] == [101, 1000] and rows[2][-1] == 102
    cut = _embed(minilm, [long_text], truncate=True)[0]
    first_tokens = _embed(minilm, [" ".join(["word"] * 254)])[0]
    assert float(cut @ first_tokens) > 0.99999


def test_token_ids_outside_the_vocabulary_are_refused(minilm: LoadedModel) -> None:
    with pytest.raises(APIError, match=r"input\[0\] has token ids outside the model's vocabulary"):
        tokenize(minilm, [[5, 30522]], truncate=False)


def test_dimensions_are_refused_for_a_model_not_trained_to_be_shortened(minilm: LoadedModel) -> None:
    assert minilm.embedding is not None
    assert output_dimensions("minilm", minilm.embedding, None) == 384
    assert output_dimensions("minilm", minilm.embedding, 384) == 384
    with pytest.raises(APIError, match="was not trained to be shortened") as caught:
        output_dimensions("minilm", minilm.embedding, 128)
    assert caught.value.status == 400 and caught.value.param == "dimensions"


def test_matryoshka_prefixes_are_renormalized(minilm: LoadedModel) -> None:
    assert minilm.embedding is not None
    profile = replace(minilm.embedding, matryoshka=True)
    assert output_dimensions("m", profile, 128) == 128
    with pytest.raises(APIError, match="between 1 and 384"):
        output_dimensions("m", profile, 0)
    shortened = replace(minilm, embedding=profile)
    rows = tokenize(shortened, SENTENCES, truncate=False)
    full, short = embed_batch(shortened, rows, 384), embed_batch(shortened, rows, 128)
    assert short.shape == (3, 128)
    expected = full[:, :128] / np.linalg.norm(full[:, :128], axis=1, keepdims=True)
    assert np.allclose(short, expected, atol=1e-5)


@pytest.mark.parametrize("pooling", ["cls", "max", "mean_sqrt_len", "lasttoken"])
def test_other_pooling_modes_pool_the_unpadded_tokens(minilm: LoadedModel, pooling: str) -> None:
    assert minilm.embedding is not None
    model = replace(minilm, embedding=replace(minilm.embedding, pooling=pooling))  # type: ignore[arg-type]
    rows = tokenize(model, SENTENCES[:2], truncate=False)
    hidden = np.array(minilm.model(mx.array([rows[0]])).last_hidden_state[0])  # unpadded, alone
    pooled = {
        "cls": hidden[0],
        "max": hidden.max(axis=0),
        "mean_sqrt_len": hidden.sum(axis=0),  # / sqrt(len): the same direction
        "lasttoken": hidden[-1],
    }[pooling]
    in_batch = embed_batch(model, [rows[1], rows[0]], 384)[1]  # padded next to a longer input
    assert float(in_batch @ (pooled / np.linalg.norm(pooled))) > 0.99999
