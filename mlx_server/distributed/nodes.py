"""Cluster nodes: other MLX Managers (or mlx-servers) this one can serve a model across machines with.

A node is added with its address and one of its admin API keys. It is asked for its report first
(GET /v1/admin/node, node_info.py), so a wrong address, a wrong key or something that is not an
MLX server is refused when added, with the reason, not found out later. The key is stored to be
sent and never shown back. Listing asks every node for its report at once, each within a bounded
time: a node that went away is shown as unreachable, never waited for.
"""

from __future__ import annotations

import asyncio
import ipaddress
from datetime import datetime
from urllib.parse import urlsplit

import httpx
from pydantic import BaseModel, Field, ValidationError, field_validator
from sqlmodel import Session, col, select

from mlx_server.config import get_settings
from mlx_server.distributed.node_info import NodeReport
from mlx_server.errors import APIError
from mlx_server.records import ClusterNode
from mlx_server.schemas.limits import HeaderToken, TextOnly
from mlx_server.utils.addresses import (
    AddressRefused,
    AddressRule,
    checked_addresses,
    parse_networks,
    resolve_host,
)

NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"
DEFAULT_PORT = 8080  # mlx-manager serve's
REPORT_PATH = "/v1/admin/node"
# Adding waits longer than listing: it happens once, and a busy node may be slow to answer.
ADD_TIMEOUT_S = 10.0
LIST_TIMEOUT_S = 3.0


def node_url(given: str) -> str:
    """`HOST`, `HOST:PORT` or a URL -> http(s)://host:port (mlx-manager's port 8080 by default)."""
    text = given.strip().rstrip("/")
    try:
        parts = urlsplit(text if "://" in text else f"http://{text}")
        port = parts.port
    except ValueError:
        parts, port = None, None
    if parts is None or parts.scheme not in ("http", "https") or not _is_host(parts.hostname) or parts.path:
        raise APIError(
            400, f"{given!r} is not a node address; give HOST, HOST:PORT or http://HOST:PORT.", param="url"
        )
    assert parts.hostname is not None
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    return f"{parts.scheme}://{host}:{port or DEFAULT_PORT}"


def _is_host(name: str | None) -> bool:
    """An IP address or a name the resolver can take (IDNA: no empty or over-long labels)."""
    if not name:
        return False
    try:
        ipaddress.ip_address(name)
        return True
    except ValueError:
        pass
    try:
        name.encode("idna")
    except UnicodeError:
        return False
    return True


class NodeIn(TextOnly):
    url: str = Field(min_length=1, max_length=512, description="HOST, HOST:PORT or http://HOST:PORT")
    api_key: HeaderToken = Field(min_length=1, max_length=512, description="An admin API key of that node")
    name: str | None = Field(default=None, pattern=NAME_PATTERN, description="Default: its host name")

    @field_validator("url")
    @classmethod
    def _url(cls, url: str) -> str:
        return node_url(url)


class NodeView(BaseModel):
    """A registered node as shown: never its key; its live report, or why there is none."""

    name: str
    url: str
    created_at: datetime
    reachable: bool
    report: NodeReport | None = None
    error: str | None = None


async def fetch_report(url: str, api_key: str, timeout_s: float) -> NodeReport:
    """The node's report, or an APIError saying why not (unreachable, key refused, not a node)."""
    try:
        async with httpx.AsyncClient(timeout=timeout_s, trust_env=False) as http:
            response = await http.get(f"{url}{REPORT_PATH}", headers={"Authorization": f"Bearer {api_key}"})
    # 400s: the address given does not answer (a 5xx would say this server failed).
    except httpx.TimeoutException:
        raise APIError(400, f"{url} did not answer within {timeout_s:g} s.", param="url") from None
    except httpx.HTTPError as exc:
        raise APIError(
            400,
            f"{url} cannot be reached ({exc or type(exc).__name__}): check that MLX Manager or "
            "mlx-server runs there on that port, listening on an address this machine reaches.",
            param="url",
        ) from None
    if response.status_code in (401, 403):
        raise APIError(
            400, f"{url} refused the API key ({response.status_code}): {_message(response)}", param="api_key"
        )
    if response.status_code != 200:
        raise APIError(
            400,
            f"{url} answered {response.status_code} for {REPORT_PATH}: it is not an MLX Manager or "
            "mlx-server of this version.",
            param="url",
        )
    try:
        return NodeReport.model_validate_json(response.content)
    except ValidationError:
        raise APIError(400, f"{url} answers, but not with an MLX node's report.", param="url") from None


async def add_node(session: Session, given: NodeIn) -> NodeView:
    """Ask the node for its report (its address checked, its key tried), then store it. A name
    in use by another URL is refused; the same name and URL again replace the stored key."""
    await _check_address(given.url)
    report = await fetch_report(given.url, given.api_key, ADD_TIMEOUT_S)
    name = given.name or report.name.split(".")[0][:64]
    node = session.exec(select(ClusterNode).where(ClusterNode.name == name)).first()
    if node is not None and node.url != given.url:
        raise APIError(
            409, f"A node named {name!r} exists ({node.url}); give this one another name.", param="name"
        )
    node = node or ClusterNode(name=name, url=given.url, api_key=given.api_key)
    node.api_key = given.api_key
    session.add(node)
    session.commit()
    session.refresh(node)
    return NodeView(name=node.name, url=node.url, created_at=node.created_at, reachable=True, report=report)


def list_nodes(session: Session) -> list[ClusterNode]:
    return list(session.exec(select(ClusterNode).order_by(col(ClusterNode.name))))


def get_node(session: Session, name: str) -> ClusterNode:
    node = session.exec(select(ClusterNode).where(ClusterNode.name == name)).first()
    if node is None:
        known = ", ".join(n.name for n in list_nodes(session)) or "none yet"
        raise APIError(404, f"No cluster node is named {name!r} (nodes: {known}).", param="name")
    return node


def remove_node(session: Session, name: str) -> None:
    session.delete(get_node(session, name))
    session.commit()


async def node_views(session: Session, timeout_s: float = LIST_TIMEOUT_S) -> list[NodeView]:
    """Every node with its live report, asked all at once; the whole takes at most `timeout_s`."""
    nodes = list_nodes(session)
    results = await asyncio.gather(
        *(fetch_report(n.url, n.api_key, timeout_s) for n in nodes), return_exceptions=True
    )
    views = []
    for node, result in zip(nodes, results, strict=True):
        shown = {"name": node.name, "url": node.url, "created_at": node.created_at}
        if isinstance(result, NodeReport):
            views.append(NodeView(**shown, reachable=True, report=result))
        elif isinstance(result, APIError):
            views.append(NodeView(**shown, reachable=False, error=result.message))
        else:
            raise result
    return views


async def _check_address(url: str) -> None:
    """Refuse a node whose host is link-local (cloud metadata lives there) unless
    MLX_SERVER_REMOTE_ALLOWED_NETWORKS lists its network (a Thunderbolt bridge's addresses are
    link-local: list 169.254.0.0/16 to use one), as for remote backends."""
    parts = urlsplit(url)
    rule = AddressRule(parse_networks(get_settings().remote_allowed_networks), allow_private=True)
    try:
        await checked_addresses(parts.hostname or "", parts.port or DEFAULT_PORT, rule, resolve_host)
    except AddressRefused as refused:
        hint = (
            " A link-local network (a Thunderbolt bridge's 169.254.0.0/16) must be listed in "
            "MLX_SERVER_REMOTE_ALLOWED_NETWORKS first."
            if "link-local" in str(refused)
            else ""
        )
        raise APIError(400, f"Cannot use the node: {refused}.{hint}", param="url") from None


def _message(response: httpx.Response) -> str:
    """The node's own reason, from its OpenAI-shaped error body when it has one."""
    try:
        error = response.json().get("error")
        return str(error.get("message") if isinstance(error, dict) else error or response.text)[:300]
    except (ValueError, AttributeError):
        return response.text[:300]
