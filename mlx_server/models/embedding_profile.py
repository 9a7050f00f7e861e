"""How an embedding model turns token states into one vector, read from its own files.

sentence-transformers directories say it in `modules.json` (a Pooling module, then optionally
Normalize) and `1_Pooling/config.json` (which pooling); `sentence_bert_config.json` gives the
sequence length the model was trained for. Without those files, mlx-embeddings' own pooled
output for the architecture is used as it is.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

Pooling = Literal["cls", "mean", "max", "mean_sqrt_len", "lasttoken", "model"]

# 1_Pooling/config.json flags, in the order sentence-transformers checks them.
_POOLING_FLAGS: list[tuple[str, Pooling]] = [
    ("pooling_mode_cls_token", "cls"),
    ("pooling_mode_mean_tokens", "mean"),
    ("pooling_mode_max_tokens", "max"),
    ("pooling_mode_mean_sqrt_len_tokens", "mean_sqrt_len"),
    ("pooling_mode_lasttoken", "lasttoken"),
]


def _json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


@dataclass(frozen=True)
class EmbeddingProfile:
    dimensions: int
    max_tokens: int
    pooling: Pooling
    normalize: bool
    # Trained for shorter prefixes of the vector (Matryoshka): `dimensions` may truncate.
    matryoshka: bool

    @classmethod
    def read(cls, path: Path, config: dict[str, Any]) -> EmbeddingProfile:
        modules = _json(path / "modules.json")
        types = [str(m.get("type", "")) for m in modules] if isinstance(modules, list) else []
        pooling_config = _json(path / "1_Pooling" / "config.json")
        pooling: Pooling = "model"
        if isinstance(pooling_config, dict):
            pooling = next((mode for flag, mode in _POOLING_FLAGS if pooling_config.get(flag)), "mean")
        st_config = _json(path / "sentence_bert_config.json")
        trained = st_config.get("max_seq_length") if isinstance(st_config, dict) else None
        positions = config.get("max_position_embeddings")
        max_tokens = next((v for v in (trained, positions) if isinstance(v, int) and v > 0), 512)
        dimensions = (
            pooling_config.get("word_embedding_dimension") if isinstance(pooling_config, dict) else None
        )
        return cls(
            dimensions=int(dimensions or config.get("hidden_size") or 0),
            max_tokens=max_tokens,
            pooling=pooling,
            # Without sentence-transformers files, mlx-embeddings' pooled output is normalized.
            normalize=any(t.endswith("Normalize") for t in types) or pooling == "model",
            matryoshka=_mentions_matryoshka(path),
        )


def _mentions_matryoshka(path: Path) -> bool:
    """Model cards of Matryoshka-trained models say so in their tags (README front matter)."""
    try:
        card = (path / "README.md").read_text(errors="replace")
    except OSError:
        return False
    front = card.split("---", 2)[1] if card.startswith("---") and card.count("---") >= 2 else ""
    return "matryoshka" in front.lower()
