"""The playground's streaming overhead: tokens/s the chat UI shows against the same generation
streamed through /v1/chat/completions.

Both go to one `mlx-manager serve` (as users run it), same prompt, greedy, same max_tokens, so
both generate the same tokens. The API side is measured from the client (first content chunk
to last, SSE parsing included); the UI side reports the figure the page shows (stored with the
reply) and the client-measured rate of the `content` events the page follows. Runs alternate;
medians reported.

    python -m mlx_server.benchmark.ui_stream [--tokens 128] [--runs 3] [--write docs/benchmarks.md]
"""

from __future__ import annotations

import platform
import statistics
import tempfile
import time
from datetime import UTC, datetime
from functools import partial
from pathlib import Path

import httpx

from mlx_server.benchmark._server import Run, alternate, running_server, stream_chat
from mlx_server.benchmark.report import bench_arguments, publish
from mlx_server.models.store import DEFAULT_MODEL_ID

PROMPT = "Write a long story about a lighthouse keeper and a storm."
MESSAGES = [{"role": "user", "content": PROMPT}]
MARKER_START = "<!-- ui-stream-benchmark:start -->"
MARKER_END = "<!-- ui-stream-benchmark:end -->"


def ui_run(client: httpx.Client, url: str, max_tokens: int) -> Run:
    """One playground turn as the page runs it: the first message creates the chat and starts
    the turn (the POST returns at once), the page follows it at /chat/{id}/events."""
    form = {
        "content": PROMPT,
        "model_id": DEFAULT_MODEL_ID,
        "temperature": "0",
        "max_tokens": str(max_tokens),
        "csrf_token": client.cookies["mlx_csrf"],
    }
    started = time.perf_counter()
    created = client.post(f"{url}/chat/send", data=form, follow_redirects=False)
    conversation = created.headers["location"].rsplit("/", 1)[1]
    first = last = 0.0
    name = ""
    with client.stream("GET", f"{url}/chat/{conversation}/events", timeout=600) as events:
        for line in events.iter_lines():
            if line.startswith("event:"):
                name = line.removeprefix("event:").strip()
            elif line.startswith("data:") and name == "content":
                last = time.perf_counter()
                first = first or last
            elif line.startswith("data:") and name == "done":
                break
    # The figure the page shows under the reply, as stored with it.
    stats = client.get(f"{url}/chat/{conversation}/export.json").json()["messages"][-1]["stats"]
    tokens = int(stats["completion_tokens"])
    return Run(tokens, (tokens - 1) / (last - first), first - started, float(stats["tokens_per_s"]))


def report(api: list[Run], ui: list[Run], max_tokens: int) -> str:
    api_tps = statistics.median(r.decode_tps for r in api)
    shown = statistics.median(r.shown_tps or 0.0 for r in ui)
    ui_client = statistics.median(r.decode_tps for r in ui)
    lines = [
        f"Measured {datetime.now(UTC):%Y-%m-%d} on {platform.machine()} ({platform.system()}), "
        f"{DEFAULT_MODEL_ID} (our GGUF import), greedy, max_tokens {max_tokens}, median of {len(api)} "
        "alternating runs against one `mlx-manager serve`.",
        "",
        "| Path | Tokens | Decode tok/s |",
        "|---|---|---|",
        f"| `/v1/chat/completions` stream, client-measured | {api[0].tokens} | {api_tps:.2f} |",
        f"| Playground: figure shown in the UI (stored stats) | {ui[0].tokens} | {shown:.2f} |",
        f"| Playground: `content` events, client-measured | {ui[0].tokens} | {ui_client:.2f} |",
        "",
        f"The UI shows **{shown / api_tps * 100:.1f} %** of the API's rate (target: within 5 %); its "
        f"own event stream arrives at {ui_client / api_tps * 100:.1f} % of it.",
    ]
    return "\n".join(lines)


def main() -> None:
    args = bench_arguments(__doc__, "update this markdown file's section", tokens=128, runs=3)

    with (
        tempfile.TemporaryDirectory(prefix="mlx-bench-") as tmp,
        running_server(Path(tmp)) as url,
        httpx.Client(follow_redirects=True) as client,
    ):
        client.get(f"{url}/")  # the CSRF cookie
        stream_chat(url, MESSAGES, 4)  # loads the model
        runs = alternate(
            args.runs,
            api=partial(stream_chat, url, MESSAGES, args.tokens),
            ui=partial(ui_run, client, url, args.tokens),
        )
    section = report(runs["api"], runs["ui"], args.tokens)
    publish(section, args.write, "Chat playground streaming vs the API", MARKER_START, MARKER_END)


if __name__ == "__main__":
    main()
