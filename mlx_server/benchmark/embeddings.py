"""Embeddings/s through /v1/embeddings against raw mlx_embeddings, at batch sizes 1, 8 and 32.

One run, same machine, same model files (all-MiniLM-L6-v2 as the server imports it on first
start), same 256 sentences of 10-40 words: the raw loop (tokenize with padding, forward, mean
pooled and normalized `text_embeds`) in this process, the server as `mlx-manager serve` in another,
one request per batch, base64 vectors (what the openai SDK asks for). Runs alternate raw/server
so drift affects both; the median of each is reported. sentence-transformers on CPU is added when
it is importable (it is not a dependency).

    python -m mlx_server.benchmark.embeddings [--runs 3] [--sentences 256] [--write docs/benchmarks.md]

`--sentences` fewer than 256 keeps a run short on a slow CPU build (the report says how many).
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import statistics
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from importlib.metadata import PackageNotFoundError, version
from importlib.util import find_spec
from pathlib import Path
from typing import Any

import httpx

from mlx_server.benchmark._server import running_server
from mlx_server.benchmark.report import write_section
from mlx_server.models.store import DEFAULT_EMBEDDING_MODEL_ID

MODEL = DEFAULT_EMBEDDING_MODEL_ID
BATCH_SIZES = (1, 8, 32)
SENTENCES = 256
TARGET = 0.90  # server / raw at batch 32
START, END = "<!-- embeddings-benchmark:start -->", "<!-- embeddings-benchmark:end -->"
WORDS = (  # one string, split when used
    "the a model river city light stone quickly under over market garden silent music window "
    "engineer paper storm winter bright old new small large green table road ship signal data "
    "memory question answer morning evening letter mountain forest bridge number careful open "
    "closed travel learn build measure carry follow listen remember explain simple complex"
)


def sentences(count: int = SENTENCES, seed: int = 0) -> list[str]:
    rng, words = random.Random(seed), WORDS.split()
    return [" ".join(rng.choice(words) for _ in range(rng.randint(10, 40))) for _ in range(count)]


def _batches(texts: list[str], size: int) -> list[list[str]]:
    return [texts[i : i + size] for i in range(0, len(texts), size)]


def raw_embedder(model_dir: Path) -> Callable[[list[str]], None]:
    import mlx.core as mx
    from mlx_embeddings.utils import load

    model, tokenizer = load(str(model_dir))

    def embed(batch: list[str]) -> None:
        inputs = tokenizer(batch, padding=True, truncation=True, max_length=256, return_tensors="np")
        output = model(mx.array(inputs["input_ids"]), attention_mask=mx.array(inputs["attention_mask"]))
        mx.eval(output.text_embeds)

    return embed


def server_embedder(url: str) -> Callable[[list[str]], None]:
    client = httpx.Client(base_url=url, timeout=600)

    def embed(batch: list[str]) -> None:
        body = {"model": MODEL, "input": batch, "encoding_format": "base64"}
        client.post("/v1/embeddings", json=body).raise_for_status()

    return embed


def st_embedder(model_dir: Path) -> Callable[[list[str]], None] | None:
    """sentence-transformers on CPU from the same local files, if it is installed."""
    if find_spec("sentence_transformers") is None:
        return None
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(model_dir), device="cpu", local_files_only=True)

    def embed(batch: list[str]) -> None:
        model.encode(batch, batch_size=len(batch), normalize_embeddings=True)

    return embed


def rate(embed: Callable[[list[str]], None], texts: list[str], batch_size: int) -> float:
    """Embeddings per second over all of `texts`, `batch_size` per call."""
    started = time.perf_counter()
    for batch in _batches(texts, batch_size):
        embed(batch)
    return len(texts) / (time.perf_counter() - started)


def measure(
    paths: dict[str, Callable[[list[str]], None]], texts: list[str], runs: int
) -> dict[str, dict[int, float]]:
    for embed in paths.values():  # warm up: loads, first-call allocations
        embed(texts[:2])
    results: dict[str, dict[int, list[float]]] = {name: {b: [] for b in BATCH_SIZES} for name in paths}
    for run in range(runs):
        for size in BATCH_SIZES:
            for name, embed in paths.items():  # alternating, so drift affects every path
                results[name][size].append(rate(embed, texts, size))
        print(
            f"run {run + 1}: " + ", ".join(f"{n} {results[n][32][-1]:.1f}/s at 32" for n in paths), flush=True
        )
    return {name: {b: statistics.median(v) for b, v in by.items()} for name, by in results.items()}


def _version(package: str) -> str:
    try:
        return version(package)
    except PackageNotFoundError:
        return "not installed"


def report(medians: dict[str, dict[int, float]], count: int, runs: int) -> str:
    machine = f"{platform.system()} {platform.machine()}, {os.cpu_count()} cores"
    ratio = medians["server"][32] / medians["raw"][32]
    labels = {
        "raw": "raw `mlx_embeddings` (padded batch, `text_embeds`)",
        "server": "server, `POST /v1/embeddings` (base64)",
        "sentence-transformers": "sentence-transformers on CPU (torch)",
    }
    lines = [
        f"Run {datetime.now(UTC):%Y-%m-%d %H:%M} UTC on {machine}; mlx {_version('mlx')}, "
        f"mlx-embeddings {_version('mlx-embeddings')}, Python {platform.python_version()}.",
        f"Model {MODEL} (float32), {count} sentences of 10-40 words, one request per batch, "
        + (f"{runs} alternating runs, medians." if runs > 1 else "1 run.")
        + " Embeddings per second:",
        "",
        "| path | " + " | ".join(f"batch {b}" for b in BATCH_SIZES) + " |",
        "|---|" + "---|" * len(BATCH_SIZES),
    ]
    for name, by_size in medians.items():
        lines.append(f"| {labels[name]} | " + " | ".join(f"{by_size[b]:.2f}" for b in BATCH_SIZES) + " |")
    if "sentence-transformers" not in medians:
        lines += [
            "",
            "sentence-transformers was not installed for this run (it is optional, not a dependency).",
        ]
    verdict = "meets" if ratio >= TARGET else "misses"
    lines += ["", f"Server / raw at batch 32: **{ratio:.1%}** ({verdict} the {TARGET:.0%} target)."]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--sentences", type=int, default=SENTENCES)
    parser.add_argument("--write", type=Path, help="update this markdown file's embeddings section")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="mlx-bench-") as tmp, running_server(Path(tmp)) as url:
        model_dir = Path(tmp) / "models" / MODEL
        paths: dict[str, Any] = {"raw": raw_embedder(model_dir), "server": server_embedder(url)}
        st = st_embedder(model_dir)
        if st is not None:
            paths["sentence-transformers"] = st
        medians = measure(paths, sentences(args.sentences), args.runs)
    section = report(medians, args.sentences, args.runs)
    print(section)
    if args.write:
        write_section(args.write, "Embeddings: server vs raw mlx-embeddings", START, END, section)


if __name__ == "__main__":
    main()
