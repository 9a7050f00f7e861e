"""A single stream's cost outside MLX: our token loop against mlx-lm's `generate_step` in one
process, on the same loaded weights (#33).

Three paths decode the same greedy reply on SmolLM2 (imported from its GGUF, loaded as the server
loads it), alternating, the order rotating each round: raw `generate_step`; `generate_text`
(what every protocol calls) with prompt lookup off; and with it on. Reported per path: the median
wall time a token (first token to last) and the event loop's or raw loop's own CPU time a token
(`time.thread_time`: what the Python around the forward pass costs, readable on a loaded machine
where wall time is not). No HTTP: the server's renderer and SSE writes are profiled with py-spy
(docs/benchmarks.md, "Single-stream decode: where a token's time goes").

    python -m mlx_server.benchmark.step_overhead [--tokens 128] [--rounds 5] [--write docs/benchmarks.md]
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import mlx.core as mx
from mlx_lm.generate import generate_step

from mlx_server.benchmark.decode import MESSAGES
from mlx_server.benchmark.report import bench_arguments, publish, run_line
from mlx_server.models.adapters.factory import create_adapter
from mlx_server.models.cpu_weights import load_text_model
from mlx_server.models.detection import ModelType, detect_model_family
from mlx_server.models.gguf_import import convert_gguf
from mlx_server.models.loaders import LoadedModel
from mlx_server.models.store import DEFAULT_MODEL_ID, default_model_gguf
from mlx_server.services.pipeline.engine.generation import generate_text
from mlx_server.services.pipeline.engine.params import CompletionStats, GenerationParams, SamplingParams
from mlx_server.utils.metal import reset_metal_thread

# (wall ms a token, CPU ms a token of the thread that consumes the tokens)
Timing = tuple[float, float]


def _loaded(model_dir: Path) -> LoadedModel:
    model, tokenizer = load_text_model(str(model_dir))
    config = json.loads((model_dir / "config.json").read_text())
    family = detect_model_family(DEFAULT_MODEL_ID, config)
    return LoadedModel(
        model_id=DEFAULT_MODEL_ID,
        model_type=ModelType.TEXT_GEN,
        family=family,
        model=model,
        tokenizer=tokenizer,
        adapter=create_adapter(family, tokenizer, None),
        config=config,
        size_bytes=0,
        probed=True,
    )


def _per_token(wall: list[float], cpu: list[float]) -> Timing:
    return (wall[-1] - wall[0]) / (len(wall) - 1) * 1000, (cpu[-1] - cpu[0]) / (len(cpu) - 1) * 1000


def raw(loaded: LoadedModel, prompt: list[int], tokens: int) -> Timing:
    wall: list[float] = []
    cpu: list[float] = []
    steps = generate_step(
        mx.array(prompt), loaded.model, max_tokens=tokens, sampler=lambda x: mx.argmax(x, axis=-1)
    )
    for _ in steps:
        wall.append(time.perf_counter())
        cpu.append(time.thread_time())
    return _per_token(wall, cpu)


def ours(loaded: LoadedModel, prompt: list[int], tokens: int, lookup: int) -> Timing:
    params = GenerationParams(sampling=SamplingParams(temperature=0), prompt_lookup=lookup)

    async def run() -> Timing:
        wall: list[float] = []
        cpu: list[float] = []
        async for piece in generate_text(loaded, list(prompt), params, tokens, CompletionStats()):
            if piece.finish_reason is None:  # the finish is no token
                wall.append(time.perf_counter())
                cpu.append(time.thread_time())
        return _per_token(wall, cpu)

    return asyncio.run(run())


MARKER_START = "<!-- step-overhead:start -->"
MARKER_END = "<!-- step-overhead:end -->"


def main() -> None:
    args = bench_arguments(__doc__, "update this markdown file's step-overhead figures", tokens=128, rounds=5)
    with tempfile.TemporaryDirectory(prefix="mlx-bench-step-") as tmp:
        convert_gguf(default_model_gguf(), Path(tmp) / "model")
        loaded = _loaded(Path(tmp) / "model")
        prompt: list[int] = loaded.tokenizer.apply_chat_template(MESSAGES, add_generation_prompt=True)
        results = _rounds(
            {
                "raw generate_step": lambda: raw(loaded, prompt, args.tokens),
                "generate_text, lookup off": lambda: ours(loaded, prompt, args.tokens, 0),
                "generate_text, lookup on": lambda: ours(loaded, prompt, args.tokens, 8),
            },
            args.rounds,
        )
        reset_metal_thread()
    base = statistics.median(wall for wall, _ in next(iter(results.values())))
    lines = [
        f"{run_line()} SmolLM2-135M loaded as the server loads it, greedy, {args.tokens} tokens, "
        f"{args.rounds} alternating rounds, medians; load average at the end: "
        + ", ".join(f"{x:.2f}" for x in os.getloadavg())
        + ".",
        "",
        "| path | ms a token | vs raw | CPU a token |",
        "|---|---|---|---|",
    ]
    for name, timings in results.items():
        wall = statistics.median(w for w, _ in timings)
        cpu = statistics.median(c for _, c in timings)
        lines.append(f"| {name} | {wall:.1f} | {base / wall:.1%} of raw's speed | {cpu:.2f} ms |")
    publish("\n".join(lines), args.write, "Single-stream step overhead", MARKER_START, MARKER_END)


def _rounds(paths: dict[str, Callable[[], Timing]], rounds: int) -> dict[str, list[Timing]]:
    """Every path once to warm up, then `rounds` rounds of all, the order rotating each round."""
    for path in paths.values():
        path()
    results: dict[str, list[Timing]] = {name: [] for name in paths}
    names = list(paths)
    for i in range(rounds):
        for name in names[i % len(names) :] + names[: i % len(names)]:
            results[name].append(paths[name]())
        print(f"round {i + 1}: " + ", ".join(f"{n} {r[-1][0]:.1f} ms" for n, r in results.items()))
    return results


if __name__ == "__main__":
    main()
