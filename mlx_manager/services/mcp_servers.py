"""MCP servers registered for the playground's agent loop: a stdio command (args, env) or a
streamable HTTP URL (headers), checked with messages that say what to fix.

Env and header values are secrets: stored, never rendered back or logged. The form shows
their names with the value blank; a blank value keeps the stored one, a name left out drops it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from pydantic import BaseModel
from sqlalchemy.exc import IntegrityError
from sqlmodel import Session, select

from mlx_manager.records import McpServer, McpTransport
from mlx_manager.services.forms import FormError
from mlx_manager.services.settings_store import mask_secret
from mlx_server.facade import utcnow

SERVER_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# RFC 9110 token characters.
HEADER_NAME = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")


class McpServerForm(BaseModel):
    """The add/edit form as typed: args one per line, env `NAME=value` and headers
    `Name: value` lines (a blank value keeps the stored one)."""

    name: str = ""
    transport: str = McpTransport.STDIO.value
    command: str = ""
    args: str = ""
    env: str = ""
    url: str = ""
    headers: str = ""

    @classmethod
    def of(cls, server: McpServer) -> McpServerForm:
        """The edit form of a stored server: secret names shown, their values blank."""
        return cls(
            name=server.name,
            transport=str(server.transport),
            command=server.command or "",
            args="\n".join(server.args),
            env="".join(f"{name}=\n" for name in server.env),
            url=server.url or "",
            headers="".join(f"{name}: \n" for name in server.headers),
        )

    def shown(self) -> McpServerForm:
        """The input to show again (a refused form): the secrets' names, never their values."""
        return self.model_copy(
            update={"env": _names_only(self.env, "="), "headers": _names_only(self.headers, ":")}
        )


@dataclass(frozen=True)
class McpServerView:
    """What a page may show of a server: secrets masked."""

    id: int
    name: str
    transport: str
    target: str  # the command line or the URL
    secrets: list[tuple[str, str]] = field(default_factory=list)  # (name, masked value)


def view(server: McpServer) -> McpServerView:
    assert server.id is not None
    if server.transport == McpTransport.STDIO:
        target = " ".join([server.command or "", *server.args])
        secrets = [(f"env {name}", mask_secret(value)) for name, value in server.env.items()]
    else:
        target = server.url or ""
        secrets = [(f"header {name}", mask_secret(value)) for name, value in server.headers.items()]
    return McpServerView(server.id, server.name, str(server.transport), target, secrets)


def list_mcp_servers(session: Session) -> list[McpServer]:
    return list(session.exec(select(McpServer).order_by(McpServer.name)))


def get_mcp_server(session: Session, server_id: int) -> McpServer:
    server = session.get(McpServer, server_id)
    if server is None:
        raise FormError(f"There is no MCP server #{server_id}; it may have been deleted.")
    return server


def _names_only(text: str, separator: str) -> str:
    blank = "=" if separator == "=" else ": "
    return "".join(f"{line.partition(separator)[0].strip()}{blank}\n" for line in _lines(text))


def _lines(text: str) -> list[str]:
    return [line.strip() for line in text.replace("\r\n", "\n").split("\n") if line.strip()]


def _pairs(
    text: str, separator: str, kind: str, pattern: re.Pattern[str], stored: dict[str, str]
) -> dict[str, str]:
    """`NAME<separator>value` lines as a dict; a blank value keeps `stored[NAME]`."""
    pairs: dict[str, str] = {}
    example = f"NAME{separator}value" if separator == "=" else f"Name{separator} value"
    for number, line in enumerate(_lines(text), start=1):
        name, found, value = line.partition(separator)
        name, value = name.strip(), value.strip()
        if not found or not pattern.match(name):
            raise FormError(f"{kind} line {number} ({name[:40]!r}): write it as {example}.")
        if name in pairs:
            raise FormError(f"{kind} {name} is given twice; keep one line for it.")
        if not value and name not in stored:
            raise FormError(f"{kind} {name} has no value: type one (a blank value keeps a stored one).")
        pairs[name] = value or stored[name]
    return pairs


def _checked_url(url: str) -> str:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise FormError(
            f"The URL must be http(s)://host[:port]/path, such as http://127.0.0.1:8000/mcp, not {url!r}."
        )
    return url


def apply_form(session: Session, server: McpServer, form: McpServerForm) -> McpServer:
    """`server` updated from `form`, checked; FormError says what to fix. Not yet stored."""
    name = form.name.strip()
    if not SERVER_NAME.match(name):
        raise FormError(
            "The name must be 1-64 letters, digits, _ or - (it prefixes tool names when two clash)."
        )
    clash = session.exec(select(McpServer).where(McpServer.name == name)).first()
    if clash is not None and clash.id != server.id:
        raise FormError(f"An MCP server named {name!r} exists already; choose another name.")
    if form.transport not in {t.value for t in McpTransport}:
        raise FormError('The transport must be "stdio" (a command) or "http" (a streamable HTTP URL).')
    server.name, server.transport = name, McpTransport(form.transport)
    if server.transport == McpTransport.STDIO:
        if not form.command.strip():
            raise FormError("A stdio server needs the command that starts it, such as npx or python.")
        server.command, server.args = form.command.strip(), _lines(form.args)
        server.env = _pairs(form.env, "=", "Env", ENV_NAME, server.env)
        server.url, server.headers = None, {}
    else:
        server.url = _checked_url(form.url.strip())
        server.headers = _pairs(form.headers, ":", "Header", HEADER_NAME, server.headers)
        server.command, server.args, server.env = None, [], {}
    return server


def save_mcp_server(session: Session, server: McpServer, form: McpServerForm) -> McpServer:
    """Add (`server` new) or edit a server from the form; FormError says what to fix."""
    try:
        apply_form(session, server, form)
    except FormError:
        if server.id is not None:
            session.expire(server)  # the stored row stays as it was
        raise
    server.updated_at = utcnow()
    session.add(server)
    try:
        session.commit()
    except IntegrityError:  # the same name saved at the same moment by another request
        session.rollback()
        raise FormError(f"An MCP server named {server.name!r} exists already; choose another name.") from None
    session.refresh(server)
    return server


def delete_mcp_server(session: Session, server_id: int) -> str:
    server = get_mcp_server(session, server_id)
    session.delete(server)
    session.commit()
    return server.name
