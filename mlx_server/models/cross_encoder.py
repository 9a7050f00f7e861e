"""Cross-encoders (rerankers): a BERT-family encoder from mlx-embeddings with a sequence
classification head of ours, loaded from the Hugging Face layouts rerankers ship in.

- `BertForSequenceClassification` (cross-encoder/ms-marco-MiniLM-L-6-v2 and its kin): weights
  `bert.*`, the score a linear `classifier` over the pooler's output (tanh of the [CLS] state).
- `XLMRobertaForSequenceClassification` (BAAI/bge-reranker-base/-large, -v2-m3): `roberta.*`
  without a pooler, the score `classifier.dense` -> tanh -> `classifier.out_proj` of the first
  token's state.

A query and a document are one input (`[CLS] query [SEP] document [SEP]`); one label's logit is
turned into a relevance in (0, 1) by the sigmoid, as sentence-transformers' CrossEncoder does.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import mlx.core as mx
import mlx.nn as nn
from mlx_embeddings.models import bert, xlm_roberta

from mlx_server.models.detection import CROSS_ENCODER_ARCHITECTURES, cross_encoder_architecture


def num_labels(config: dict[str, Any]) -> int:
    labels = config.get("id2label")
    return len(labels) if isinstance(labels, dict) and labels else int(config.get("num_labels", 1))


class BertCrossEncoder(nn.Module):  # type: ignore[misc]  # mlx ships no type hints
    def __init__(self, config: dict[str, Any]) -> None:
        super().__init__()
        self.bert = bert.Model(bert.ModelArgs.from_dict(config))
        self.classifier = nn.Linear(int(config["hidden_size"]), num_labels(config))

    def __call__(self, input_ids: mx.array, token_type_ids: mx.array, attention_mask: mx.array) -> mx.array:
        output = self.bert(input_ids, token_type_ids=token_type_ids, attention_mask=attention_mask)
        logits: mx.array = self.classifier(output.pooler_output)
        return logits


class RobertaClassificationHead(nn.Module):  # type: ignore[misc]  # mlx ships no type hints
    def __init__(self, hidden_size: int, labels: int) -> None:
        super().__init__()
        self.dense = nn.Linear(hidden_size, hidden_size)
        self.out_proj = nn.Linear(hidden_size, labels)

    def __call__(self, first_token: mx.array) -> mx.array:
        projected: mx.array = self.out_proj(mx.tanh(self.dense(first_token)))
        return projected


class RobertaCrossEncoder(nn.Module):  # type: ignore[misc]  # mlx ships no type hints
    def __init__(self, config: dict[str, Any]) -> None:
        super().__init__()
        args = xlm_roberta.ModelArgs.from_dict({**config, "add_pooling_layer": False})
        self.roberta = xlm_roberta.Model(args)
        self.classifier = RobertaClassificationHead(int(config["hidden_size"]), num_labels(config))

    def __call__(self, input_ids: mx.array, token_type_ids: mx.array, attention_mask: mx.array) -> mx.array:
        output = self.roberta(input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids)
        logits: mx.array = self.classifier(output.last_hidden_state[:, 0])
        return logits


CrossEncoder = BertCrossEncoder | RobertaCrossEncoder


def build_cross_encoder(config: dict[str, Any]) -> CrossEncoder:
    architecture = cross_encoder_architecture(config)
    if architecture is None:
        raise ValueError(f"not a cross-encoder: architectures {config.get('architectures')}")
    if CROSS_ENCODER_ARCHITECTURES[architecture] == "bert":
        return BertCrossEncoder(config)
    return RobertaCrossEncoder(config)


def load_cross_encoder(path: str) -> tuple[CrossEncoder, Any]:
    """The model (weights checked against the layout: a missing or misshapen tensor raises) and
    its tokenizer (transformers' fast tokenizer, which encodes query/document pairs)."""
    from transformers import AutoTokenizer

    directory = Path(path)
    config = json.loads((directory / "config.json").read_text())
    model = build_cross_encoder(config)
    weights: dict[str, mx.array] = {}
    for file in sorted(directory.glob("*.safetensors")):
        weights.update(mx.load(str(file)))  # type: ignore[arg-type]
    # Buffers HF keeps that the MLX modules compute (position ids) are not weights. Half
    # precision runs several times slower on a CPU-only MLX build: float32 there.
    dtype = None if mx.metal.is_available() else mx.float32
    weights = {
        k: v.astype(dtype) if dtype is not None else v
        for k, v in weights.items()
        if not k.endswith("position_ids")
    }
    model.load_weights(list(weights.items()), strict=True)
    model.eval()
    mx.eval(model.parameters())
    return model, AutoTokenizer.from_pretrained(str(directory))


def relevance(logits: mx.array) -> mx.array:
    """Scores in (0, 1): the sigmoid of a single label's logit, else the last label's softmax."""
    if logits.shape[-1] == 1:
        return mx.sigmoid(logits[:, 0])
    return mx.softmax(logits, axis=-1)[:, -1]
