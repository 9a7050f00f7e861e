"""A rank's shard of a model (inside the rank workers).

mlx-lm's `sharded_load` does the same for hub repositories (it downloads only a pipeline
stage's files). Our models are directories on each machine's disk, so the weights are loaded
lazily and only what this rank keeps is evaluated (read). A quantized model is dequantized to
float32 first where the server's own loader would do it (models/cpu_weights.py: a CPU with a
fast BLAS), so the group computes what the whole model computes in one process.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import mlx.core as mx

STRATEGIES = ("tensor", "pipeline")


def load_shard(path: Path, strategy: str, group: Any) -> Any:
    """This rank's part of the model at `path`, evaluated; every rank returns together."""
    from mlx_lm.utils import dequantize_model, load_config, load_model

    from mlx_server.models.cpu_weights import dequantizes_on_load

    model, _ = load_model(path, lazy=True)
    if dequantizes_on_load(path, load_config(path)):
        model = dequantize_model(model)
        model.set_dtype(mx.float32)
    if strategy == "tensor":
        model.shard(group)
    elif strategy == "pipeline":
        model.model.pipeline(group)
    else:
        raise ValueError(f"unknown strategy {strategy!r}; use one of {', '.join(STRATEGIES)}")
    mx.eval(model.parameters())
    # Every rank has its shard before any rank serves (mlx-lm's sharded_load does the same).
    mx.eval(mx.distributed.all_sum(mx.array(1.0), group=group, stream=mx.cpu))
    return model
