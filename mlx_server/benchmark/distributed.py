"""Sharded serving (#34, mlx_server/distributed): a model split over two ranks on this machine
(MLX's ring backend over loopback, tensor parallel) against the same weights in one process.

SmolLM2-135M has 9 attention heads, which do not split into 2, so the model is a random llama
of SmolLM2's size built with mlx-lm's own classes (SmolLM2's vocabulary and tokenizer, width
768, 12 layers, 12 heads and 4 KV heads, MLP 2048: ~113 M parameters, float32). Both are served
by one `mlx-manager serve`, the same directory registered twice ("local" and "sharded").
Each round sends both the same greedy streamed request, alternating which goes first, with a
~250-token prompt new to both (so TTFT is a full prefill); the texts must be identical.
Decode tokens/s and TTFT measured on the client; medians.

    python -m mlx_server.benchmark.distributed [--rounds 3] [--tokens 64] [--write docs/benchmarks.md]
"""

from __future__ import annotations

import json
import os
import statistics
import tempfile
from pathlib import Path
from typing import Any

import httpx

from mlx_server.benchmark._server import Run, running_server, stream_chat
from mlx_server.benchmark.report import bench_arguments, publish, run_line
from mlx_server.models.gguf_import import convert_gguf
from mlx_server.models.store import default_model_gguf

MARKER_START = "<!-- distributed-benchmark:start -->"
MARKER_END = "<!-- distributed-benchmark:end -->"
SHAPE = {
    "model_type": "llama",
    "hidden_size": 768,
    "num_hidden_layers": 12,
    "intermediate_size": 2048,
    "num_attention_heads": 12,
    "num_key_value_heads": 4,
    "rms_norm_eps": 1e-5,
    "max_position_embeddings": 4096,
    "rope_theta": 10000.0,
    "tie_word_embeddings": True,
}
TEXT = (
    "The harbour town woke slowly. Fishing boats came in with the tide, gulls followed them, and "
    "the market stalls opened one by one along the quay. A baker carried trays of bread across "
    "the square while the church clock struck seven. Children ran to school past the lighthouse, "
    "and an old man mended nets on the steps of the customs house, as he had every morning for "
    "forty years. "
) * 3


def build_model(out: Path, tokenizer_dir: Path) -> Path:
    """A random llama of SmolLM2's size with SmolLM2's tokenizer (seeded: the same every run)."""
    import mlx.core as mx
    from mlx.utils import tree_flatten
    from mlx_lm.models.llama import Model, ModelArgs

    config = {
        **SHAPE,
        "vocab_size": int(json.loads((tokenizer_dir / "config.json").read_text())["vocab_size"]),
    }
    mx.random.seed(34)
    model = Model(ModelArgs.from_dict(config))
    out.mkdir(parents=True)
    mx.save_safetensors(str(out / "model.safetensors"), dict(tree_flatten(model.parameters())))
    (out / "config.json").write_text(json.dumps(config))
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        if (tokenizer_dir / name).is_file():
            (out / name).write_bytes((tokenizer_dir / name).read_bytes())
    return out


def _post(url: str, path: str, body: dict[str, Any]) -> dict[str, Any]:
    response = httpx.post(f"{url}{path}", json=body, timeout=600)
    if not response.is_success:
        raise SystemExit(f"POST {path}: HTTP {response.status_code}: {response.text}")
    answer: dict[str, Any] = response.json()
    return answer


def _linked_copy(model_dir: Path) -> Path:
    """The same files under a second directory (hard links: nothing copied), which the server
    registers as a model of its own (one directory is one model)."""
    copy = model_dir.with_name(model_dir.name + "-sharded")
    copy.mkdir()
    for file in model_dir.iterdir():
        os.link(file, copy / file.name)
    return copy


def measure(url: str, model_dir: Path, rounds: int, tokens: int) -> dict[str, list[Run]]:
    for model_id, path in (("local", model_dir), ("sharded", _linked_copy(model_dir))):
        _post(url, "/v1/admin/models", {"path": str(path), "id": model_id, "probe": False})
    plan = _post(url, "/v1/admin/sharded/plan", {"model": "sharded", "ranks": 2})
    print(f"plan: {plan['strategy']}, {[round(b / 2**20) for b in plan['rank_bytes']]} MiB per rank")
    _post(url, "/v1/admin/sharded", {"model": "sharded", "ranks": 2})
    for model_id in ("local", "sharded"):  # loads "local"; both warm
        stream_chat(url, [{"role": "user", "content": "Hi"}], 2, model=model_id)
    results: dict[str, list[Run]] = {"local": [], "sharded": []}
    for i in range(rounds):
        messages = [{"role": "user", "content": f"Story {i + 1}. {TEXT}Go on with the story."}]
        order = ("local", "sharded") if i % 2 == 0 else ("sharded", "local")
        for model_id in order:
            results[model_id].append(stream_chat(url, messages, tokens, model=model_id))
        local, sharded = results["local"][-1], results["sharded"][-1]
        if local.text != sharded.text:
            raise SystemExit(f"round {i + 1}: the texts differ:\n{local.text!r}\n---\n{sharded.text!r}")
        print(
            f"round {i + 1}: local {local.decode_tps:.1f} tok/s, TTFT {local.ttft_s:.3f} s; "
            f"sharded {sharded.decode_tps:.1f} tok/s, TTFT {sharded.ttft_s:.3f} s"
        )
    return results


def report(results: dict[str, list[Run]], rounds: int, tokens: int, load: str) -> str:
    rows = ["| served by | decode tok/s | TTFT | vs one process |", "|---|---|---|---|"]
    base = statistics.median(r.decode_tps for r in results["local"])
    for name, label in (("local", "one process"), ("sharded", "2 ranks, tensor parallel (ring, loopback)")):
        tps = statistics.median(r.decode_tps for r in results[name])
        ttft = statistics.median(r.ttft_s for r in results[name])
        rows.append(f"| {label} | {tps:.1f} | {ttft * 1000:.0f} ms | {tps / base:.2f}x |")
    setup = (
        f"A random llama of SmolLM2-135M's size (width 768, 12 layers, 12 heads / 4 KV heads, "
        f"float32, SmolLM2's vocabulary), greedy, streamed, max_tokens {tokens}, a new ~250-token "
        f"prompt each round, {rounds} alternating rounds (medians); texts identical in every round. "
        f"Load average at the start: {load}."
    )
    why = (
        "On this 2-core CPU over loopback, splitting costs more than it saves: the two ranks share "
        "the same two cores the single process already uses, so no compute is added, and each "
        "decode step pays two all_sum collectives per layer (24 here) over TCP, a round trip to "
        "rank 0 over its socket and the logits row (196 KB) sent back. Sharding is for a model "
        "that does not fit one machine, or for machines joined by a fast link (Thunderbolt with "
        "RDMA: exo reports 1.8x on 2 Macs); see docs/DISTRIBUTED.md."
    )
    return "\n".join([run_line(), setup, "", *rows, "", why])


def main() -> None:
    args = bench_arguments(__doc__, "update this markdown file's section", rounds=3, tokens=64)
    load = ", ".join(f"{v:.2f}" for v in os.getloadavg())
    with tempfile.TemporaryDirectory(prefix="mlx-bench-") as tmp:
        smollm = Path(tmp) / "smollm"
        convert_gguf(default_model_gguf(), smollm)
        model_dir = build_model(Path(tmp) / "smol-shaped", smollm)
        settings = {"MLX_MANAGER_IMPORT_DEFAULT_MODEL": "false", "MLX_SERVER_IDLE_TTL_SECONDS": "0"}
        home = Path(tmp) / "home"
        home.mkdir()
        with running_server(home, settings) as url:
            results = measure(url, model_dir, args.rounds, args.tokens)
    section = report(results, args.rounds, args.tokens, load)
    publish(section, args.write, "Sharded serving: 2 ranks against one process", MARKER_START, MARKER_END)


if __name__ == "__main__":
    main()
