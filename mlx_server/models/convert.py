"""Convert a Hugging Face checkpoint to a quantized MLX model with mlx-lm's own functions.

Run in a child process by services/operations/conversion.py (`python -m
mlx_server.models.convert SOURCE TARGET --bits 4 --group-size 64`), so a conversion never holds
the MLX thread that serves requests, and a cancel is a kill. It does what `mlx_lm.convert`
does (load lazily, cast to the checkpoint's dtype, `quantize_model`, `save`), and evaluates the
quantized weights one by one first so it can report progress: one JSON object per line on
stdout (`{"stage": "quantize", "done": bytes, "total": bytes}`), `{"error": ...}` on failure.
mlx-lm's own prints go to stderr.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from pathlib import Path
from typing import Any, TextIO

# Stages in order; `done`/`total` count bytes for "quantize", else 0/1 and 1/1.
STAGES = ("load", "quantize", "save")
REPORT_EVERY_BYTES = 16 * 2**20


def _report(out: TextIO, stage: str, done: int, total: int) -> None:
    out.write(json.dumps({"stage": stage, "done": done, "total": total}) + "\n")
    out.flush()


def _cast_to_checkpoint_dtype(model: Any, config: dict[str, Any]) -> None:
    """mlx_lm.convert's dtype step: floating weights in the checkpoint's own dtype."""
    import mlx.core as mx
    from mlx.utils import tree_map_with_path
    from mlx_lm.convert import MODEL_CONVERSION_DTYPES

    dtype = config.get("torch_dtype") or (config.get("text_config") or {}).get("dtype")
    if not isinstance(dtype, str) or dtype not in MODEL_CONVERSION_DTYPES:
        return
    target = getattr(mx, dtype)
    cast = getattr(model, "cast_predicate", lambda _: True)

    def set_dtype(key: str, value: Any) -> Any:
        return value.astype(target) if cast(key) and mx.issubdtype(value.dtype, mx.floating) else value

    model.update(tree_map_with_path(set_dtype, model.parameters()))


def convert(source: Path, target: Path, bits: int, group_size: int, out: TextIO) -> None:
    import mlx.core as mx
    from mlx.utils import tree_flatten
    from mlx_lm.utils import load, quantize_model, save

    _report(out, "load", 0, 1)
    model, tokenizer, config = load(str(source), lazy=True, return_config=True)
    _cast_to_checkpoint_dtype(model, config)
    model, config = quantize_model(model, config, group_size, bits)
    weights = tree_flatten(model.parameters())
    total = sum(array.nbytes for _, array in weights)
    done = reported = 0
    _report(out, "quantize", 0, total)
    for _, array in weights:  # reads and quantizes each weight; save() then only writes
        mx.eval(array)
        done += array.nbytes
        if done - reported >= REPORT_EVERY_BYTES or done == total:
            _report(out, "quantize", done, total)
            reported = done
    del weights
    _report(out, "save", 0, 1)
    save(target, source, model, tokenizer, config)
    _report(out, "save", 1, 1)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("source", type=Path)
    parser.add_argument("target", type=Path)
    parser.add_argument("--bits", type=int, required=True)
    parser.add_argument("--group-size", type=int, required=True)
    args = parser.parse_args(argv)
    out = sys.stdout
    try:
        with contextlib.redirect_stdout(sys.stderr):  # mlx-lm prints its [INFO] lines
            convert(args.source, args.target, args.bits, args.group_size, out)
    except Exception as exc:
        out.write(json.dumps({"error": f"{type(exc).__name__}: {exc}"}) + "\n")
        out.flush()
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
