"""A GGUF file imported by our importer and served by `mlx-manager serve`: how long the import
takes, what it stores, and decode and prefill tokens/s through /v1/chat/completions.

Decode: a short question, greedy, `--tokens` tokens streamed (first content chunk to last).
Prefill: a ~`--prompt` token prompt (a new one each run: the prompt cache must not help) and a
single token back, timed whole: prompt tokens / time to the answer. Each configuration gets a
fresh server: as shipped, and with `--float-mb` raising MLX_SERVER_CPU_FLOAT_WEIGHTS_MAX_MB so a
model over the default 4096 MB float32 cap loads dequantized too (models/cpu_weights.py).

    python -m mlx_server.benchmark.gguf_model --gguf qwen.gguf [--tokens 64] [--runs 3]
        [--prompt 512] [--float-mb 8192] [--write docs/benchmarks.md]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from mlx_server.benchmark._server import running_server, stream_chat
from mlx_server.benchmark.report import publish, run_line

MODEL = "bench"
QUESTION = [{"role": "user", "content": "Write a long story about a lighthouse keeper and a storm."}]
MARKER_START = "<!-- gguf-model-benchmark:start -->"
MARKER_END = "<!-- gguf-model-benchmark:end -->"


def import_gguf(gguf: Path, home: Path) -> tuple[float, str]:
    """Seconds the CLI import took, and its output (the plan, then the result)."""
    env = {**os.environ, "MLX_MANAGER_HOME": str(home)}
    command = [
        str(Path(sys.executable).parent / "mlx-manager"),
        "models",
        "import-gguf",
        str(gguf),
        "--id",
        MODEL,
    ]
    started = time.perf_counter()
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=True)
    return time.perf_counter() - started, done.stdout


def prefill_rate(url: str, words: int, run: int) -> float:
    """Prompt tokens per second of one request answering a single token."""
    text = f"Run {run}. " + " ".join(f"word{i % 97}" for i in range(words))
    body = {
        "model": MODEL,
        "messages": [{"role": "user", "content": text}],
        "max_tokens": 1,
        "temperature": 0,
    }
    started = time.perf_counter()
    response = httpx.post(f"{url}/v1/chat/completions", json=body, timeout=900)
    elapsed = time.perf_counter() - started
    response.raise_for_status()
    return int(response.json()["usage"]["prompt_tokens"]) / elapsed


def measure(
    home: Path, settings: dict[str, str], args: argparse.Namespace
) -> tuple[float, float, float, str]:
    """(decode tok/s, prefill tok/s, prompt tokens, first answer) medians over `args.runs`."""
    with running_server(home, settings) as url:
        first = stream_chat(url, [{"role": "user", "content": "What is the capital of France?"}], 16, MODEL)
        decode = [stream_chat(url, QUESTION, args.tokens, MODEL).decode_tps for _ in range(args.runs)]
        prefill = [prefill_rate(url, args.prompt, run) for run in range(args.runs)]
    return statistics.median(decode), statistics.median(prefill), args.prompt, first.text


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--gguf", type=Path, required=True)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--prompt", type=int, default=512, help="prompt words (about as many tokens)")
    parser.add_argument("--float-mb", type=int, default=8192)
    parser.add_argument("--write", type=Path)
    parser.add_argument("--float-only", action="store_true", help="skip the as-shipped configuration")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="mlx-bench-gguf-") as tmp:
        home = Path(tmp)
        seconds, plan = import_gguf(args.gguf, home)
        stored = sum(f.stat().st_size for f in (home / "models" / MODEL).iterdir())
        rows = []
        configurations = [
            ("as shipped", {}),
            (f"float32 cap {args.float_mb} MB", {"MLX_SERVER_CPU_FLOAT_WEIGHTS_MAX_MB": str(args.float_mb)}),
        ]
        for label, settings in configurations[1:] if args.float_only else configurations:
            decode, prefill, _, answer = measure(home, settings, args)
            rows.append(f"| {label} | {decode:.2f} | {prefill:.1f} | {answer.strip()[:60]!r} |")
    plan_lines = "\n".join(f"    {line}" for line in plan.strip().splitlines())
    section = "\n".join(
        [
            run_line(),
            "",
            f"`{args.gguf.name}` imported by `mlx-manager models import-gguf` in {seconds:.0f} s, "
            f"{stored / 2**20:.0f} MiB on disk:",
            "",
            plan_lines,
            "",
            f"Through `mlx-manager serve`: decode {args.tokens} tokens, prefill a ~{args.prompt}-word"
            f" prompt; medians of {args.runs} runs.",
            "",
            "| Weights | Decode tok/s | Prefill tok/s | First answer |",
            "|---|---|---|---|",
            *rows,
        ]
    )
    publish(section, args.write, "GGUF model through the server", MARKER_START, MARKER_END)


if __name__ == "__main__":
    main()
