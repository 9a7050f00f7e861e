"""This machine as a node of a cluster: the report another MLX Manager reads before it serves a
model across machines with it (GET /v1/admin/node). `NodeReport` is the one type of that report:
built here, read back by the coordinator (nodes.py), which refuses an answer that is not one."""

from __future__ import annotations

import hashlib
import platform
import socket
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import mlx.core as mx
import psutil
from pydantic import BaseModel
from sqlmodel import Session, select

from mlx_server import __version__
from mlx_server.models.detection import detect_model_type
from mlx_server.models.pool import get_model_pool
from mlx_server.records import ModelCapabilities, ModelRecord
from mlx_server.utils.memory import physical_memory_bytes

# mx.distributed's backends: ring (TCP: Ethernet, Wi-Fi, a Thunderbolt bridge), jaccl (RDMA over
# Thunderbolt 5, macOS 26.2+), mpi (an MPI installation). mlx 0.32's is_available takes the name.
BACKENDS = ("ring", "jaccl", "mpi")


class NodeMemory(BaseModel):
    total_bytes: int
    available_bytes: int
    # The model pool's budget on that node and what its loaded models take of it.
    budget_bytes: int
    pool_used_bytes: int


class NodeModel(BaseModel):
    id: str
    path: str
    type: str
    # sha256 of its config.json: the same model on two nodes has the same one (None: no config.json).
    config_sha256: str | None


class NodeReport(BaseModel):
    name: str  # the machine's host name
    url: str  # this server's root URL as the caller reached it
    version: str  # MLX Manager's
    mlx_version: str
    mlx_lm_version: str
    platform: str  # e.g. "Darwin 25.2.0"
    machine: str  # e.g. "arm64"
    device: str  # "gpu" (Metal) or "cpu"
    memory: NodeMemory
    backends: dict[str, bool]
    models: list[NodeModel]


def backends_available() -> dict[str, bool]:
    """Whether this MLX can start each distributed backend (`mx.distributed.is_available`)."""
    found = {}
    for backend in BACKENDS:
        try:
            found[backend] = bool(mx.distributed.is_available(backend=backend))
        except (TypeError, ValueError, RuntimeError):  # a backend this MLX does not know
            found[backend] = False
    return found


def config_sha256(model_dir: Path) -> str | None:
    config = model_dir / "config.json"
    return hashlib.sha256(config.read_bytes()).hexdigest() if config.is_file() else None


def _package_version(name: str) -> str:
    try:
        return version(name)
    except PackageNotFoundError:
        return "not installed"


def _models(session: Session) -> list[NodeModel]:
    probed = {c.model_id: c.model_type for c in session.exec(select(ModelCapabilities))}
    found = []
    for record in session.exec(select(ModelRecord).order_by(ModelRecord.id)):
        path = Path(record.path)
        if not path.exists():
            continue  # registered, but its files are gone: nothing a coordinator could use
        kind = probed.get(record.id) or (detect_model_type(path).value if path.is_dir() else "unknown")
        found.append(NodeModel(id=record.id, path=record.path, type=kind, config_sha256=config_sha256(path)))
    return found


def node_report(session: Session, url: str) -> NodeReport:
    """What this node is and holds; `url`: its root URL as the request reached it."""
    pool = get_model_pool()
    return NodeReport(
        name=socket.gethostname(),
        url=url.rstrip("/"),
        version=__version__,
        mlx_version=_package_version("mlx"),
        mlx_lm_version=_package_version("mlx-lm"),
        platform=f"{platform.system()} {platform.release()}",
        machine=platform.machine(),
        device="gpu" if mx.default_device().type == mx.DeviceType.gpu else "cpu",
        memory=NodeMemory(
            total_bytes=physical_memory_bytes(),
            available_bytes=int(psutil.virtual_memory().available),
            budget_bytes=pool.budget_bytes,
            pool_used_bytes=pool.used_bytes,
        ),
        backends=backends_available(),
        models=_models(session),
    )
