"""How a model splits across ranks, and whether each node has room for its share.

Tensor parallelism (mlx-lm's `Model.shard()`) gives every rank a slice of each layer's
matrices: whole attention heads and KV heads per rank, so both counts (and the MLP's width)
must divide by the number of ranks; every decode step sums the partial results across the ranks
twice per layer. Pipeline parallelism (`model.model.pipeline()`) gives each rank a run of whole
layers and passes the activations along once per step. The embeddings, the final norm and the
head sit on every rank either way.

The memory figures are the weights as a rank loads them (float32 where the server's loader
dequantizes: models/cpu_weights.py), against each node's pool budget less what its pool holds;
a request's KV cache comes on top, split the same way.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from mlx_server.models.cpu_weights import loaded_bytes_estimate, safetensors_headers

STRATEGY_CHOICES = ("auto", "tensor", "pipeline")
_LAYER = re.compile(r"(?:^|\.)layers\.(\d+)\.")
_DTYPE_BYTES = {
    "F64": 8,
    "I64": 8,
    "U64": 8,
    "F32": 4,
    "I32": 4,
    "U32": 4,
    "F16": 2,
    "BF16": 2,
    "I16": 2,
    "U16": 2,
}
GB = 1024**3


@dataclass(frozen=True)
class ModelLayout:
    """What a split depends on, read from the model's directory (no weights loaded)."""

    model_id: str
    architecture: str
    attention_heads: int | None
    kv_heads: int | None
    intermediate_size: int | None
    layers: int
    tensor_parallel: bool  # the model class has shard()
    pipeline: bool  # its inner model has pipeline()
    shared_bytes: int  # embeddings, final norm, head: on every rank
    layer_bytes: tuple[int, ...]  # per layer, as loaded
    config_sha256: str


def config_fingerprint(path: Path) -> str:
    """The same model on two machines has the same config.json (compared before a start)."""
    return hashlib.sha256((path / "config.json").read_bytes()).hexdigest()


def read_layout(model_id: str, path: Path, config: dict[str, Any]) -> ModelLayout:
    """On the MLX thread: the model class is built with lazy weights (nothing is allocated) to
    see which splits mlx-lm implements for it."""
    from mlx_lm.utils import _get_classes

    model_class, args_class = _get_classes(config)
    model = model_class(args_class.from_dict(config))
    inner = getattr(model, "model", None)
    layers = len(getattr(model, "layers", None) or getattr(inner, "layers", None) or [])
    heads = config.get("num_attention_heads")
    headers = safetensors_headers(path)
    stored = {name: _tensor_bytes(info) for name, info in headers.items()}
    scale = loaded_bytes_estimate(path, config) / max(1, sum(stored.values()))
    per_layer = [0] * layers
    shared = 0
    for name, size in stored.items():
        match = _LAYER.search(name)
        if match and int(match.group(1)) < layers:
            per_layer[int(match.group(1))] += size
        else:
            shared += size
    return ModelLayout(
        model_id=model_id,
        architecture=str(config.get("model_type", "")),
        attention_heads=heads,
        kv_heads=config.get("num_key_value_heads", heads),
        intermediate_size=config.get("intermediate_size"),
        layers=layers,
        tensor_parallel=hasattr(model, "shard"),
        pipeline=inner is not None and hasattr(inner, "pipeline"),
        shared_bytes=int(shared * scale),
        layer_bytes=tuple(int(b * scale) for b in per_layer),
        config_sha256=config_fingerprint(path),
    )


def _tensor_bytes(info: dict[str, Any]) -> int:
    count = 1
    for dim in info["shape"]:
        count *= int(dim)
    return count * _DTYPE_BYTES.get(str(info["dtype"]), 1)


@dataclass(frozen=True)
class NodeFacts:
    """What a plan needs to know of a node that would run ranks (this machine: service.py)."""

    name: str
    address: str  # the IP its ranks listen on
    free_bytes: int  # its pool budget less what its pool holds (this machine: less what loading evicts)
    ring: bool  # mx.distributed.is_available("ring")
    model_sha256: str | None  # its copy's config fingerprint; None: it has no such model
    error: str | None = None  # it could not be reached


@dataclass(frozen=True)
class NodeShare:
    node: str
    ranks: tuple[int, ...]
    bytes: int
    free_bytes: int

    @property
    def fits(self) -> bool:
        return self.bytes <= self.free_bytes


@dataclass(frozen=True)
class ShardPlan:
    model_id: str
    strategy: str | None  # None: no strategy works
    nodes: tuple[str, ...]  # the node of each rank, rank 0 first
    rank_bytes: tuple[int, ...]
    shares: tuple[NodeShare, ...]
    refusals: tuple[str, ...]

    @property
    def ok(self) -> bool:
        return self.strategy is not None and not self.refusals

    def as_dict(self) -> dict[str, Any]:
        return {
            **asdict(self),
            "ok": self.ok,
            "shares": [{**asdict(s), "fits": s.fits} for s in self.shares],
            "total_bytes": sum(self.rank_bytes),
        }


def _divisors_hint(counts: list[int], ranks: int) -> str:
    fitting = [n for n in range(2, 9) if all(c % n == 0 for c in counts)]
    return f"; {', '.join(map(str, fitting))} ranks would" if fitting else ""


def tensor_refusal(layout: ModelLayout, ranks: int) -> str | None:
    if not layout.tensor_parallel:
        return f"mlx-lm has no tensor-parallel split for {layout.architecture} models (no shard())"
    counts = [
        (layout.attention_heads, "attention heads"),
        (layout.kv_heads, "KV heads"),
        (layout.intermediate_size, "MLP columns"),
    ]
    for count, what in counts:
        if count is not None and count % ranks:
            known = [c for c, _ in counts if c is not None]
            return f"{count} {what} do not split into {ranks} ranks{_divisors_hint(known, ranks)}"
    return None


def pipeline_refusal(layout: ModelLayout, ranks: int) -> str | None:
    if not layout.pipeline:
        return f"mlx-lm has no pipeline split for {layout.architecture} models (no pipeline())"
    if layout.layers < ranks:
        return f"{layout.layers} layers do not make {ranks} pipeline stages"
    return None


def _strategy(layout: ModelLayout, ranks: int, wanted: str) -> tuple[str | None, list[str]]:
    reasons = {
        "tensor": tensor_refusal(layout, ranks),
        "pipeline": pipeline_refusal(layout, ranks),
    }
    order = ["tensor", "pipeline"] if wanted == "auto" else [wanted]
    for strategy in order:
        if reasons[strategy] is None:
            return strategy, []
    return None, [f"{s} parallelism: {reasons[s]}" for s in order]


def rank_bytes(layout: ModelLayout, strategy: str, ranks: int) -> list[int]:
    """The weights each rank holds."""
    if strategy == "tensor":
        return [layout.shared_bytes + -(-sum(layout.layer_bytes) // ranks)] * ranks
    # mlx-lm's even split: the low ranks get the extra layers; rank r runs the layers after
    # those of ranks r+1..N-1 (rank N-1 has the first layers).
    base, extra = divmod(layout.layers, ranks)
    split = [base + (1 if r < extra else 0) for r in range(ranks)]
    sizes = []
    for r in range(ranks):
        start = sum(split[r + 1 :])
        sizes.append(layout.shared_bytes + sum(layout.layer_bytes[start : start + split[r]]))
    return sizes


def _node_refusals(layout: ModelLayout, node: NodeFacts) -> list[str]:
    if node.error is not None:
        return [f"node {node.name!r} cannot be reached: {node.error}"]
    refusals = []
    if not node.ring:
        refusals.append(f"node {node.name!r} has no ring backend in its MLX")
    if node.model_sha256 is None:
        refusals.append(
            f"node {node.name!r} has no model {layout.model_id!r}: add the same model there under that id"
        )
    elif node.model_sha256 != layout.config_sha256:
        refusals.append(f"node {node.name!r} has another {layout.model_id!r} (its config.json differs)")
    return refusals


def make_plan(layout: ModelLayout, rank_nodes: list[NodeFacts], wanted: str = "auto") -> ShardPlan:
    """A plan for `layout` with one rank per entry of `rank_nodes` (rank 0 first; a node may
    hold several ranks), or the reasons it cannot work."""
    ranks = len(rank_nodes)
    refusals: list[str] = []
    if ranks < 2:
        refusals.append("a sharded model needs at least 2 ranks")
    strategy, reasons = _strategy(layout, max(ranks, 2), wanted)
    refusals += reasons
    sizes = rank_bytes(layout, strategy, ranks) if strategy and ranks else [0] * ranks
    shares = []
    for node in dict.fromkeys(n.name for n in rank_nodes):
        facts = next(n for n in rank_nodes if n.name == node)
        held = tuple(r for r, n in enumerate(rank_nodes) if n.name == node)
        share = NodeShare(node, held, sum(sizes[r] for r in held), facts.free_bytes)
        refusals += _node_refusals(layout, facts)
        if facts.error is None and not share.fits:
            refusals.append(
                f"node {node!r} needs {share.bytes / GB:.2f} GB for {len(held)} rank(s) but has "
                f"{share.free_bytes / GB:.2f} GB free in its budget"
            )
        shares.append(share)
    return ShardPlan(
        model_id=layout.model_id,
        strategy=strategy,
        nodes=tuple(n.name for n in rank_nodes),
        rank_bytes=tuple(sizes),
        shares=tuple(shares),
        refusals=tuple(refusals),
    )
