"""Sharded models, for the admin API and the dashboard: plan, start, stop, restart, status.

A sharded model is served under its own model id: starting it forms a group of ranks
(group.py) and puts a pool entry whose model is the group's remote forward pass
(remote_model.py) in place of whatever the pool held under that id, pinned; its memory is
accounted as this machine's share of the weights. Stopping it (or unloading it from the pool)
ends the ranks; the id then loads in this process again on its next request.

Its ranks run on this machine (`ranks` of them, on 127.0.0.1) or, given `nodes`, rank 0 here
and one rank on each registered node listed (a name listed twice runs two there): each node's
report (nodes.py) feeds the plan (its budget, its copy of the model by config hash), and its
ranks are started and watched through it (remote_launcher.py, node_ranks.py on the node).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import asdict, dataclass
from typing import Any
from urllib.parse import urlsplit

from mlx_server.config import get_settings
from mlx_server.database import background_session
from mlx_server.distributed.group import GroupState, ShardedGroup
from mlx_server.distributed.launcher import LocalRankLauncher, RankLauncher
from mlx_server.distributed.node_info import NodeReport
from mlx_server.distributed.nodes import LIST_TIMEOUT_S, fetch_report, get_node
from mlx_server.distributed.plan import NodeFacts, ShardPlan, config_fingerprint, make_plan, read_layout
from mlx_server.distributed.remote_launcher import NodeRankLauncher, route_ip
from mlx_server.distributed.remote_model import RemoteModel, SinglePromptCache
from mlx_server.errors import APIError
from mlx_server.models.adapters import create_adapter
from mlx_server.models.detection import ModelType
from mlx_server.models.loaders import LoadedModel, ModelSpec, read_spec
from mlx_server.models.pool import get_model_pool
from mlx_server.records import ClusterNode
from mlx_server.utils.metal import run_on_metal_thread

THIS_MACHINE = "127.0.0.1"
MAX_RANKS = 16

_groups: dict[str, ShardedGroup] = {}
_plans: dict[str, ShardPlan] = {}
_asked: dict[str, list[str] | None] = {}  # the nodes a start named (restart names them again)


@dataclass(frozen=True)
class ShardedStatus:
    model_id: str
    state: str  # starting | ready | degraded | stopped
    strategy: str
    ranks: int
    nodes: list[str]  # the node of each rank, rank 0 first
    rank_bytes: list[int]  # the weights each rank holds (the plan's figures)
    failed_node: str | None
    failure: str | None
    started_at: float

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _this_machine(model_id: str, spec: ModelSpec) -> NodeFacts:
    import mlx.core as mx

    pool = get_model_pool()
    loaded = pool.get_loaded(model_id)  # replaced by the sharded model: its room counts as free
    held = loaded.size_bytes if loaded is not None else 0
    return NodeFacts(
        name=THIS_MACHINE,
        address=THIS_MACHINE,
        free_bytes=max(0, pool.budget_bytes - pool.used_bytes + held),
        ring=bool(mx.distributed.is_available("ring")),
        model_sha256=config_fingerprint(spec.path),
    )


def _text_spec(model_id: str) -> ModelSpec:
    spec = read_spec(model_id)
    if spec.model_type is not ModelType.TEXT_GEN:
        raise APIError(
            400, f"Model {model_id!r} is a {spec.model_type} model; only text models shard.", param="model"
        )
    if spec.lora is not None or spec.draft is not None:
        raise APIError(
            400, f"Model {model_id!r} has a LoRA adapter or a draft model; those do not shard.", param="model"
        )
    return spec


def _registered(names: list[str]) -> dict[str, ClusterNode]:
    with background_session() as session:
        return {name: get_node(session, name) for name in dict.fromkeys(names)}  # 404: not registered


def _node_facts(node: ClusterNode, model_id: str, report: NodeReport | BaseException) -> NodeFacts:
    address = urlsplit(node.url).hostname or node.url
    if not isinstance(report, NodeReport):
        error = report.message if isinstance(report, APIError) else str(report)
        return NodeFacts(node.name, address, 0, False, None, error=error)
    copy = next((m for m in report.models if m.id == model_id), None)
    return NodeFacts(
        name=node.name,
        address=address,
        free_bytes=max(0, report.memory.budget_bytes - report.memory.pool_used_bytes),
        ring=report.backends.get("ring", False),
        model_sha256=copy.config_sha256 if copy is not None else None,
    )


async def _rank_nodes(model_id: str, spec: ModelSpec, ranks: int, nodes: list[str] | None) -> list[NodeFacts]:
    """The facts of each rank's node, rank 0 (this machine) first; every node asked at once."""
    here = _this_machine(model_id, spec)
    if not nodes:
        return [here] * ranks
    registered = await asyncio.to_thread(_registered, nodes)
    reports = await asyncio.gather(
        *(fetch_report(n.url, n.api_key, LIST_TIMEOUT_S) for n in registered.values()), return_exceptions=True
    )
    facts = {
        name: _node_facts(node, model_id, report)
        for (name, node), report in zip(registered.items(), reports, strict=True)
    }
    return [here] + [facts[name] for name in nodes]


async def plan_sharding(
    model_id: str, ranks: int = 2, strategy: str = "auto", nodes: list[str] | None = None
) -> ShardPlan:
    """How `model_id` would split over `ranks` ranks on this machine or, given `nodes`, over
    rank 0 here and one rank on each node listed; or why it cannot."""
    if strategy not in ("auto", "tensor", "pipeline"):
        raise APIError(400, f"strategy {strategy!r} is none of auto, tensor, pipeline.", param="strategy")
    if nodes:
        ranks = 1 + len(nodes)
    if not 2 <= ranks <= MAX_RANKS:
        raise APIError(400, f"ranks must be 2 to {MAX_RANKS}.", param="ranks")
    spec = await asyncio.to_thread(_text_spec, model_id)
    layout = await run_on_metal_thread(lambda: read_layout(model_id, spec.path, spec.config))
    return make_plan(layout, await _rank_nodes(model_id, spec, ranks, nodes), strategy)


def _launchers(nodes: list[str] | None, ranks: int) -> list[RankLauncher]:
    """Rank 0's launcher (this machine, listening where the nodes reach it), then each rank's."""
    if not nodes:
        local = LocalRankLauncher(THIS_MACHINE)
        return [local] * ranks
    registered = _registered(nodes)
    local = LocalRankLauncher(route_ip(registered[nodes[0]].url))
    remote = {name: NodeRankLauncher(name, node.url, node.api_key) for name, node in registered.items()}
    return [local] + [remote[name] for name in nodes]


def refusal(plan: ShardPlan) -> APIError:
    return APIError(
        409,
        f"Model {plan.model_id!r} cannot be sharded: {'; '.join(plan.refusals)}.",
        code="sharding_refused",
    )


def _loaded_model(spec: ModelSpec, group: ShardedGroup, plan: ShardPlan) -> LoadedModel:
    """The pool entry: the group's forward pass, the model's own tokenizer and adapter."""
    from mlx_lm.utils import load_tokenizer

    assert group.link is not None, "the group was formed"
    tokenizer = load_tokenizer(spec.path, eos_token_ids=spec.config.get("eos_token_id"))
    return LoadedModel(
        model_id=spec.model_id,
        model_type=spec.model_type,
        family=spec.family,
        model=RemoteModel(group.link, spec.config, int(group.ready.get("activation_bytes", 4))),
        tokenizer=tokenizer,
        adapter=create_adapter(spec.family, tokenizer, spec.capabilities),
        config=spec.config,
        size_bytes=sum(b for b, n in zip(plan.rank_bytes, plan.nodes, strict=True) if n == THIS_MACHINE),
        probed=spec.capabilities is not None,
        prompt_cache=SinglePromptCache(),
        defaults=spec.defaults,
        path=spec.path,
        sharded=group,
    )


async def start_sharded(
    model_id: str, ranks: int = 2, strategy: str = "auto", nodes: list[str] | None = None
) -> ShardedStatus:
    """Form the group and serve `model_id` from it; refused (409) with the plan's reasons."""
    running = _groups.get(model_id)
    if running is not None and running.state in (GroupState.STARTING, GroupState.READY):
        raise APIError(
            409, f"Model {model_id!r} is sharded already ({running.state}).", code="sharded_running"
        )
    plan = await plan_sharding(model_id, ranks, strategy, nodes)
    if not plan.ok or plan.strategy is None:
        raise refusal(plan)
    spec = await asyncio.to_thread(_text_spec, model_id)
    settings = get_settings()
    group = ShardedGroup(
        model_id=model_id,
        path=spec.path,
        strategy=plan.strategy,
        hosts=list(plan.nodes),
        directory=settings.home_dir / "cluster" / f"{model_id.replace('/', '--')}-{int(time.time() * 1000)}",
        launchers=await asyncio.to_thread(_launchers, nodes, len(plan.nodes)),
        timeout_s=settings.distributed_timeout_s,
        config_sha256=config_fingerprint(spec.path),
    )
    _groups[model_id], _plans[model_id], _asked[model_id] = group, plan, nodes
    await asyncio.to_thread(group.form, settings.distributed_start_timeout_s)
    try:
        loaded = await asyncio.to_thread(_loaded_model, spec, group, plan)
        await get_model_pool().install(loaded)
    except BaseException:
        group.close()
        raise
    return _status(group)


def _group(model_id: str) -> ShardedGroup:
    group = _groups.get(model_id)
    if group is None:
        raise APIError(404, f"Model {model_id!r} is not sharded.", param="model", code="not_sharded")
    return group


async def _end(group: ShardedGroup) -> None:
    """Take the group's entry out of the pool (which ends its ranks), or end them."""
    pool = get_model_pool()
    loaded = pool.get_loaded(group.model_id)
    if loaded is not None and loaded.sharded is group:
        await pool.unload(group.model_id)  # 409 while it serves a request
    group.close()


async def stop_sharded(model_id: str) -> ShardedStatus:
    group = _group(model_id)
    await _end(group)
    del _groups[model_id]
    return _status(group)


async def restart_sharded(model_id: str) -> ShardedStatus:
    """A new group in place of the old one (degraded or not), with the same ranks and strategy."""
    group = _group(model_id)
    await _end(group)
    return await start_sharded(model_id, len(group.hosts), group.strategy, _asked.get(model_id))


def _status(group: ShardedGroup) -> ShardedStatus:
    plan = _plans.get(group.model_id)
    loaded = get_model_pool().get_loaded(group.model_id)
    state = group.state
    if state is GroupState.READY and (loaded is None or loaded.sharded is not group):
        state = GroupState.STOPPED  # unloaded from the pool: its ranks ended with it
    return ShardedStatus(
        model_id=group.model_id,
        state=str(state),
        strategy=group.strategy,
        ranks=len(group.hosts),
        nodes=list(group.hosts),
        rank_bytes=list(plan.rank_bytes) if plan is not None else [],
        failed_node=group.failed_host,
        failure=group.failure,
        started_at=group.started_at,
    )


def sharded_status() -> list[ShardedStatus]:
    return [_status(group) for group in _groups.values()]


def reset_sharded() -> None:
    """End every group (an app's shutdown, after the pool unloaded its entries) and forget them."""
    for group in _groups.values():
        group.close()
    _groups.clear()
    _plans.clear()
    _asked.clear()
