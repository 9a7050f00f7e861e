"""Prompt lookup (#33, services/pipeline/engine/prompt_lookup.py and batch_lookup.py): decode
speed with and without, on an agent-style edit and on free writing, alone and with four streams
at once (four edits; two edits and two stories).

The edit: a ~300-token Python file in the prompt, "return it with one function renamed",
greedy; the model re-emits most of its context, where drafts copied from the prompt pay. Free
writing: a short story, where matches are chance. Each row alternates `prompt_lookup: 0` and the
server's default in rounds (drift affects both alike); the texts must be identical, or the run
stops. Decode tokens/s on the client, first content to last.

First, in this process, what verifying costs: one forward pass of 1, 5 and 9 tokens per row over
a 600-token context, for one sequence and for a batch of four (mlx-lm's BatchKVCache), and what
giving each row of the batch its own length back would cost (mlx-lm's `dynamic_roll` of every
layer's keys and values, as its BatchKVCache does for right padding): the reason the batch keeps
the drafts every row accepted instead (batch_lookup.py).

    python -m mlx_server.benchmark.prompt_lookup [--rounds 3] [--tokens 300] [--write docs/benchmarks.md]
"""

from __future__ import annotations

import statistics
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mlx_server.benchmark._server import Run, running_server, stream_chat
from mlx_server.benchmark.report import bench_arguments, publish, run_line
from mlx_server.models.gguf_import import convert_gguf
from mlx_server.models.store import DEFAULT_MODEL_ID, default_model_gguf

MARKER_START = "<!-- prompt-lookup-benchmark:start -->"
MARKER_END = "<!-- prompt-lookup-benchmark:end -->"

CODE = '''import json
from pathlib import Path


def load_settings(path: Path) -> dict:
    """Read the settings file, or return the defaults when it does not exist."""
    if not path.exists():
        return {"theme": "light", "font_size": 12, "recent": []}
    with path.open() as handle:
        return json.load(handle)


def save_settings(path: Path, settings: dict) -> None:
    """Write the settings file, creating its folder first."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as handle:
        json.dump(settings, handle, indent=2)


def add_recent(settings: dict, name: str, limit: int = 10) -> dict:
    """Put a file name first in the recent list, without duplicates."""
    recent = [item for item in settings.get("recent", []) if item != name]
    recent.insert(0, name)
    settings["recent"] = recent[:limit]
    return settings


def main() -> None:
    path = Path.home() / ".editor" / "settings.json"
    settings = load_settings(path)
    settings = add_recent(settings, "notes.txt")
    save_settings(path, settings)


if __name__ == "__main__":
    main()
'''
EDIT = [
    {"role": "system", "content": "You are a careful coding assistant. Reply with code only."},
    {
        "role": "user",
        "content": f"Here is a file:\n\n```python\n{CODE}```\n\n"
        "Return the whole file with the function `add_recent` renamed to `remember_file` "
        "(also where it is called). Change nothing else.",
    },
]
FREE = [{"role": "user", "content": "Write a long story about a lighthouse keeper and a storm."}]


def _run(url: str, messages: list[dict[str, Any]], tokens: int, lookup: int | None) -> Run:
    extra = {} if lookup is None else {"prompt_lookup": lookup}
    return stream_chat(url, messages, tokens, extra=extra)


def _together(url: str, jobs: list[list[dict[str, Any]]], tokens: int, lookup: int | None) -> Run:
    """One request per conversation in `jobs`, sent at once; their summed decode rate and their
    texts (joined in order, so a comparison covers every one)."""
    runs: list[Run | None] = [None] * len(jobs)
    barrier = threading.Barrier(len(jobs))

    def one(i: int) -> None:
        barrier.wait()
        runs[i] = _run(url, jobs[i], tokens, lookup)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(jobs))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    done = [r for r in runs if r is not None]
    return Run(
        sum(r.tokens for r in done),
        sum(r.decode_tps for r in done),
        max(r.ttft_s for r in done),
        text="\n---\n".join(r.text for r in done),
        accepted=sum(r.accepted for r in done),
    )


CONTEXT_TOKENS = 600
PASS_TOKENS = (1, 5, 9)


def _median_ms(run: Callable[[], object], repeats: int = 7) -> float:
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        run()
        times.append(time.perf_counter() - started)
    return statistics.median(times) * 1000


def _filled_cache(model: Any, rows: int) -> list[Any]:
    """A KV cache (a batch's, for several rows) holding a CONTEXT_TOKENS-token context."""
    import mlx.core as mx
    from mlx_lm.models.cache import BatchKVCache, KVCache

    cache = [KVCache() if rows == 1 else BatchKVCache([0] * rows) for _ in model.layers]
    model(mx.array([list(range(100, 100 + CONTEXT_TOKENS))] * rows), cache=cache)
    mx.eval([layer.state for layer in cache])
    return cache


def _pass_ms(model: Any, cache: list[Any], rows: int, tokens: int) -> float:
    """A forward pass of `tokens` per row over the cache (trimmed back after each)."""
    import mlx.core as mx

    block = mx.array([list(range(500, 500 + tokens))] * rows)

    def step() -> None:
        mx.eval(model(block, cache=cache))
        for layer in cache:
            layer.trim(tokens)

    return _median_ms(step)


def _roll_ms(cache: list[Any]) -> float:
    """Re-aligning a batch of four rows kept to different lengths (right padding moved left)."""
    import mlx.core as mx
    from mlx_lm.models.cache import dynamic_roll

    shifts = mx.array([[1], [0], [2], [3]])

    def roll() -> None:
        for layer in cache:
            layer.keys = dynamic_roll(layer.keys, shifts, axis=2)
            layer.values = dynamic_roll(layer.values, shifts, axis=2)
        mx.eval([layer.keys for layer in cache], [layer.values for layer in cache])

    return _median_ms(roll)


def pass_costs(model_dir: Path) -> dict[str, float]:
    """Milliseconds of one forward pass of n tokens per row (keys "1x5", "4x9", ...) and of
    re-aligning a batch of four's caches ("roll")."""
    from mlx_server.models.cpu_weights import load_text_model

    model, _ = load_text_model(str(model_dir))
    costs: dict[str, float] = {}
    for rows in (1, 4):
        cache = _filled_cache(model, rows)
        for n in PASS_TOKENS:
            costs[f"{rows}x{n}"] = _pass_ms(model, cache, rows, n)
    costs["roll"] = _roll_ms(cache)
    return costs


def costs_table(costs: dict[str, float]) -> list[str]:
    table = [
        f"| rows x tokens per row ({CONTEXT_TOKENS}-token context) | forward pass | tokens/s if all kept |",
        "|---|---|---|",
    ]
    for rows in (1, 4):
        for n in PASS_TOKENS:
            ms = costs[f"{rows}x{n}"]
            table.append(f"| {rows} x {n} | {ms:.0f} ms | {rows * n * 1000 / ms:.0f} |")
    table.append(f"| re-aligning 4 rows' caches (dynamic_roll) | {costs['roll']:.0f} ms | |")
    return table


Row = tuple[str, Callable[[int | None], Run]]


def measure(url: str, rounds: int, tokens: int) -> list[tuple[str, list[Run], list[Run]]]:
    stream_chat(url, [{"role": "user", "content": "Hi"}], 2)  # loads the model
    rows: list[Row] = [
        ("code edit, 1 stream", lambda lookup: _run(url, EDIT, tokens, lookup)),
        ("free writing, 1 stream", lambda lookup: _run(url, FREE, tokens, lookup)),
        ("code edit, 4 streams", lambda lookup: _together(url, [EDIT] * 4, tokens, lookup)),
        ("2 code edits + 2 free writing", lambda lookup: _together(url, [EDIT, FREE] * 2, tokens, lookup)),
    ]
    results = []
    for name, run in rows:
        off: list[Run] = []
        on: list[Run] = []
        for i in range(rounds):
            for lookup in (0, None) if i % 2 == 0 else (None, 0):
                (off if lookup == 0 else on).append(run(lookup))
            if on[-1].text != off[-1].text:
                raise SystemExit(f"{name}: the texts differ:\n{on[-1].text}\n---\n{off[-1].text}")
            print(f"{name}, round {i + 1}: off {off[-1].decode_tps:.2f}, on {on[-1].decode_tps:.2f} tok/s")
        results.append((name, off, on))
    return results


def report(
    results: list[tuple[str, list[Run], list[Run]]], costs: dict[str, float], rounds: int, tokens: int
) -> str:
    rows = [
        "| workload | tokens | decode tok/s, off | decode tok/s, on | on / off | from drafts |",
        "|---|---|---|---|---|---|",
    ]
    for name, off, on in results:
        slow, fast = statistics.median(r.decode_tps for r in off), statistics.median(r.decode_tps for r in on)
        share = sum(r.accepted for r in on) / max(1, sum(r.tokens for r in on))
        rows.append(
            f"| {name} | {on[-1].tokens} | {slow:.2f} | {fast:.2f} | {fast / slow:.2f}x | {share:.0%} |"
        )
    setup = (
        f"Model {DEFAULT_MODEL_ID} (float32 on this CPU), greedy, streamed, max_tokens {tokens}, "
        f"{rounds} alternating rounds (medians); off = `prompt_lookup: 0`, on = the server's default "
        "(MLX_SERVER_PROMPT_LOOKUP_TOKENS=8). Texts identical in every round (every stream's). Four "
        "streams: summed decode rates of four requests sent at once (identical ones, or two edits "
        "and two stories)."
    )
    costs_part = ["", "What a verifying pass costs:", "", *costs_table(costs)]
    return "\n".join([run_line(), setup, "", *rows, *costs_part])


def main() -> None:
    args = bench_arguments(__doc__, "update this markdown file's section", rounds=3, tokens=300)
    with tempfile.TemporaryDirectory(prefix="mlx-bench-") as tmp:
        model_dir = Path(tmp) / "model"
        convert_gguf(default_model_gguf(), model_dir)
        costs = pass_costs(model_dir)
        print(costs)
    with tempfile.TemporaryDirectory(prefix="mlx-bench-") as tmp, running_server(Path(tmp)) as url:
        results = measure(url, args.rounds, args.tokens)
    section = report(results, costs, args.rounds, args.tokens)
    publish(section, args.write, "Prompt lookup: decode speed", MARKER_START, MARKER_END)


if __name__ == "__main__":
    main()
