"""The router's overhead: a request routed to a remote backend against calling that backend
directly, in one run.

Two real servers on loopback: `mlx-manager serve` on a fresh home (the backend; it imports the
default model) and a standalone `mlx-server` on another empty home (the router) with the first
registered as its remote backend "direct". The same greedy streamed chat goes to the backend
directly (model id) and through the router (`direct/<model id>`), alternating; medians of TTFT
and decode tok/s, both measured on the client (SSE parsing included). Targets (issue #20):
TTFT within 50 ms, decode within 5 %.

    python -m mlx_server.benchmark.remote [--tokens 128] [--runs 3] [--write docs/benchmarks.md]
"""

from __future__ import annotations

import statistics
import tempfile
from functools import partial
from pathlib import Path

import httpx

from mlx_server.benchmark._server import Run, alternate, running_server, running_standalone, stream_chat
from mlx_server.benchmark.report import bench_arguments, publish, run_line
from mlx_server.models.store import DEFAULT_MODEL_ID

MESSAGES = [{"role": "user", "content": "Write a long story about a lighthouse keeper and a storm."}]
BACKEND = "direct"
MARKER_START = "<!-- remote-benchmark:start -->"
MARKER_END = "<!-- remote-benchmark:end -->"
TTFT_TARGET_MS = 50.0
DECODE_TARGET = 0.95


def register_backend(router: str, backend: str) -> None:
    response = httpx.post(
        f"{router}/v1/admin/backends",
        json={"name": BACKEND, "kind": "openai", "base_url": f"{backend}/v1"},
        timeout=60,
    )
    response.raise_for_status()
    if DEFAULT_MODEL_ID not in response.json()["models"]:
        raise SystemExit(f"the backend does not list {DEFAULT_MODEL_ID}: {response.text}")


def report(direct: list[Run], routed: list[Run], max_tokens: int) -> str:
    def median(runs: list[Run], field: str) -> float:
        return statistics.median(float(getattr(r, field)) for r in runs)

    ttft = (median(direct, "ttft_s") * 1000, median(routed, "ttft_s") * 1000)
    tps = (median(direct, "decode_tps"), median(routed, "decode_tps"))
    added, ratio = ttft[1] - ttft[0], tps[1] / tps[0]
    ttft_ok = "within" if added <= TTFT_TARGET_MS else "over"
    decode_ok = "within" if ratio >= DECODE_TARGET else "outside"
    routed_name = f"`{BACKEND}/{DEFAULT_MODEL_ID}`"
    return "\n".join(
        [
            run_line(),
            "",
            f"{DEFAULT_MODEL_ID}, greedy, max_tokens {max_tokens}, streamed; median of {len(direct)} "
            "alternating runs. Backend: `mlx-manager serve`; router: standalone `mlx-server` with it "
            "registered as an OpenAI-kind remote backend, both on loopback.",
            "",
            "| Path | Tokens | TTFT ms | Decode tok/s |",
            "|---|---|---|---|",
            f"| Backend called directly | {direct[0].tokens} | {ttft[0]:.1f} | {tps[0]:.2f} |",
            f"| Through the router ({routed_name}) | {routed[0].tokens} | {ttft[1]:.1f} | {tps[1]:.2f} |",
            "",
            f"TTFT {added:+.1f} ms ({ttft_ok} the {TTFT_TARGET_MS:.0f} ms target), decode "
            f"**{ratio * 100:.1f} %** of direct ({decode_ok} the 5 % target).",
        ]
    )


def main() -> None:
    args = bench_arguments(__doc__, "docs file to update with the results", tokens=128, runs=3)
    routed_model = f"{BACKEND}/{DEFAULT_MODEL_ID}"
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "backend").mkdir()
        with (
            running_server(Path(tmp) / "backend") as backend,
            running_standalone(Path(tmp) / "router") as router,
        ):
            register_backend(router, backend)
            stream_chat(backend, MESSAGES, 8)  # load the model before timing
            stream_chat(router, MESSAGES, 8, model=routed_model)  # and the router's first-request setup
            runs = alternate(
                args.runs,
                direct=partial(stream_chat, backend, MESSAGES, args.tokens),
                routed=partial(stream_chat, router, MESSAGES, args.tokens, model=routed_model),
            )
    section = report(runs["direct"], runs["routed"], args.tokens)
    publish(section, args.write, "Remote backend overhead", MARKER_START, MARKER_END)


if __name__ == "__main__":
    main()
