"""MCP servers' tools through the official SDK (mcp 2): list them and call them, every step
bounded by the manager's `mcp_timeout_seconds`.

A connection is one asyncio task that opens the SDK's client, serves the calls sent to it
through a queue and closes the client: anyio's cancel scopes (the SDK's timeouts and its stdio
shutdown) must be entered and left in one task. Closing ends a stdio server's process (the SDK
closes its stdin, then terminates its process tree). What goes wrong becomes a message saying
what happened, with the server's env and header values masked.
"""

from __future__ import annotations

import asyncio
import json
import math
import re
import tempfile
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from typing import Any, TextIO
from urllib.parse import urlsplit

import anyio
import httpx2
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp.types import CallToolResult, TextContent

from mlx_manager.records import McpServer, McpTransport
from mlx_manager.services.chat_tools import (
    TOOL_NAME,
    ArgumentError,
    ToolResult,
    check_arguments,
    rejected_call_result,
)
from mlx_server.facade import Tool

SSE_READ_SECONDS = 300  # the SDK's default: an HTTP server may keep its event stream quiet
STDERR_SHOWN = 300  # characters of a stdio server's stderr shown with its error


class McpUnavailable(Exception):
    """The server could not be started, reached or understood; the message says how."""


@dataclass(frozen=True)
class McpTool:
    """One tool as its server lists it."""

    server: str
    name: str
    description: str
    parameters: dict[str, Any]


Request = tuple[str, dict[str, Any], "asyncio.Future[CallToolResult]"]


class McpConnection:
    """One server, connected from `open()` to `close()`."""

    def __init__(self, server: McpServer, timeout: float) -> None:
        self.server = server
        self.timeout = timeout
        self._requests: asyncio.Queue[Request | None] = asyncio.Queue()
        self._ready: asyncio.Future[list[McpTool]] = asyncio.get_running_loop().create_future()
        self._task: asyncio.Task[None] | None = None
        self._error = "not connected"

    async def open(self) -> list[McpTool]:
        """Start the server (or reach it) and list its tools; McpUnavailable within the timeout."""
        self._task = asyncio.create_task(self._serve(), name=f"mcp {self.server.name}")
        try:
            return await asyncio.wait_for(asyncio.shield(self._ready), self.timeout + 1)
        except TimeoutError:  # the task's own deadline comes first; this bounds the unexpected
            raise McpUnavailable(f"{self.server.name} did not answer within {self.timeout:g} s") from None

    async def call(self, name: str, arguments: dict[str, Any]) -> ToolResult:
        """Call a tool of this server. Never raises: a failure is an error result."""
        if self._task is None or self._task.done() or not self._ready.done():
            message = f"Error: MCP server {self.server.name} is unavailable ({self._error})."
            return ToolResult(message, is_error=True)
        future: asyncio.Future[CallToolResult] = asyncio.get_running_loop().create_future()
        self._requests.put_nowait((name, arguments, future))
        try:
            return _tool_result(await future)
        except McpUnavailable as exc:
            return ToolResult(f"Error: the call to {name} failed: {exc}", is_error=True)

    async def close(self) -> None:
        if self._task is not None:
            self._requests.put_nowait(None)
            await self._task

    async def _serve(self) -> None:
        with tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace") as errlog:
            try:
                await self._connected(errlog)
            except Exception as exc:
                self._error = self._describe(exc, errlog)
            finally:
                self._fail_waiting(McpUnavailable(self._error))

    async def _connected(self, errlog: TextIO) -> None:
        deadline = anyio.current_time() + self.timeout
        with anyio.CancelScope(deadline=deadline) as connecting:
            async with AsyncExitStack() as stack:
                client = await stack.enter_async_context(Client(await self._transport(stack, errlog)))
                tools = await self._listed(client)
                connecting.deadline = math.inf  # connected: each call has its own deadline now
                self._ready.set_result(tools)
                while (request := await self._requests.get()) is not None:
                    await self._answer(client, request)
        if connecting.cancelled_caught:
            raise TimeoutError

    async def _transport(self, stack: AsyncExitStack, errlog: TextIO) -> Any:
        server = self.server
        if server.transport == McpTransport.STDIO:
            params = StdioServerParameters(command=server.command or "", args=server.args, env=server.env)
            return stdio_client(params, errlog=errlog)
        timeout = httpx2.Timeout(self.timeout, read=SSE_READ_SECONDS)
        http = await stack.enter_async_context(httpx2.AsyncClient(headers=server.headers, timeout=timeout))
        return streamable_http_client(server.url or "", http_client=http)

    async def _listed(self, client: Client) -> list[McpTool]:
        tools: list[McpTool] = []
        cursor: str | None = None
        while True:
            page = await client.list_tools(cursor=cursor)
            tools += [
                McpTool(self.server.name, tool.name, tool.description or "", dict(tool.input_schema))
                for tool in page.tools
            ]
            cursor = page.next_cursor
            if cursor is None:
                return tools

    async def _answer(self, client: Client, request: Request) -> None:
        name, arguments, future = request
        try:
            with anyio.fail_after(self.timeout):
                result = await client.call_tool(name, arguments)
        except Exception as exc:  # the connection may still serve the next call
            if not future.done():
                future.set_exception(McpUnavailable(self._describe(exc, None)))
        else:
            if not future.done():
                future.set_result(result)

    def _fail_waiting(self, error: McpUnavailable) -> None:
        if not self._ready.done():
            self._ready.set_exception(error)
            self._ready.exception()  # retrieved: `open()` may have stopped waiting for it
        while not self._requests.empty():
            request = self._requests.get_nowait()
            if request is not None and not request[2].done():
                request[2].set_exception(error)

    def _describe(self, exc: BaseException, errlog: TextIO | None) -> str:
        """What happened, in words, with the server's secrets masked."""
        while isinstance(exc, BaseExceptionGroup):  # the SDK's task groups wrap the cause
            exc = exc.exceptions[0]
        server = self.server
        if isinstance(exc, TimeoutError):
            text = f"{server.name} did not answer within {self.timeout:g} s"
        elif isinstance(exc, MCPError) and "closed" in exc.error.message.lower():
            text = f"{server.name} closed the connection (the server exited or dropped it)"
        elif isinstance(exc, OSError) and server.transport == McpTransport.STDIO:
            text = f"{server.name} could not be started ({server.command!r}: {exc.strerror or exc})"
        elif isinstance(exc, httpx2.HTTPError):
            where = _shown_url(server.url)
            text = f"{server.name} could not be reached at {where} ({type(exc).__name__}: {exc})"
        else:
            text = f"{server.name} failed ({type(exc).__name__}: {exc})"
        said = _tail(errlog)
        if said:
            text += f"; it said: {said}"
        return _masked(text, [*server.env.values(), *server.headers.values()])


def _tail(errlog: TextIO | None) -> str:
    if errlog is None:
        return ""
    errlog.seek(0)
    text = " ".join(errlog.read().split())
    return text if len(text) <= STDERR_SHOWN else "…" + text[-STDERR_SHOWN:]


def _masked(text: str, secrets: list[str]) -> str:
    for secret in sorted(secrets, key=len, reverse=True):
        if len(secret) >= 3:
            text = text.replace(secret, "****")
    return text


def _shown_url(url: str | None) -> str:
    """The URL without user:password@."""
    parts = urlsplit(url or "")
    return parts._replace(netloc=parts.netloc.rpartition("@")[2]).geturl()


def _tool_result(result: CallToolResult) -> ToolResult:
    """The call's content as the tool message: text blocks joined, other blocks named."""
    texts = [
        block.text if isinstance(block, TextContent) else f"[{block.type} content]"
        for block in result.content
    ]
    if not texts and result.structured_content is not None:
        texts = [json.dumps(result.structured_content, ensure_ascii=False)]
    text = "\n".join(texts)
    if not result.is_error:
        return ToolResult(text)
    return ToolResult(text if text.lower().startswith("error") else f"Error: {text}", is_error=True)


async def list_server_tools(server: McpServer, timeout: float) -> list[McpTool]:
    """Connect, list the tools, disconnect; McpUnavailable says what went wrong."""
    connection = McpConnection(server, timeout)
    try:
        return await connection.open()
    finally:
        await connection.close()


class McpToolbox:
    """The MCP tools of one agent-loop run: the conversation's enabled servers, connected for
    the run. A tool keeps its own name unless another tool has it, then it is prefixed with
    its server's name."""

    def __init__(self, timeout: float) -> None:
        self.timeout = timeout
        self.problems: list[str] = []  # a server that could not be used, for the run's status
        self._connections: list[McpConnection] = []
        self._tools: dict[str, tuple[McpConnection, McpTool]] = {}

    async def open(self, servers: list[McpServer], taken: set[str]) -> None:
        """Connect to every server at once (a hung one costs the timeout once, not per server)."""
        self._connections = [McpConnection(server, self.timeout) for server in servers]
        listed = await asyncio.gather(*(c.open() for c in self._connections), return_exceptions=True)
        names = set(taken)
        for connection, tools in zip(self._connections, listed, strict=True):
            if isinstance(tools, BaseException):
                self.problems.append(f"MCP server {connection.server.name}: {tools}")
                continue
            for tool in tools:
                name = _offered_name(tool, names)
                names.add(name)
                self._tools[name] = (connection, tool)

    def definitions(self) -> list[Tool]:
        """The tools as the pipeline takes them, under the names the model calls."""
        return [Tool(name, tool.description, tool.parameters) for name, (_, tool) in self._tools.items()]

    def has(self, name: str) -> bool:
        return name in self._tools

    async def call(self, name: str, arguments: str) -> ToolResult:
        """Run the model's call (arguments as it wrote them) on its server. Never raises."""
        connection, tool = self._tools[name]
        try:
            checked = check_arguments(tool.parameters, arguments)
        except ArgumentError as exc:
            return ToolResult(rejected_call_result(name, arguments, str(exc)), is_error=True)
        return await connection.call(tool.name, checked)

    async def close(self) -> None:
        await asyncio.gather(*(c.close() for c in self._connections))


def _offered_name(tool: McpTool, taken: set[str]) -> str:
    if TOOL_NAME.match(tool.name) and tool.name not in taken:
        return tool.name
    base = re.sub(r"[^A-Za-z0-9_-]", "_", f"{tool.server}_{tool.name}")[:60]
    name, number = base, 2
    while name in taken:
        name, number = f"{base}_{number}", number + 1
    return name


@asynccontextmanager
async def mcp_toolbox(servers: list[McpServer], taken: set[str], timeout: float) -> AsyncIterator[McpToolbox]:
    """The servers' tools for one run; every connection closed (stdio processes ended) after."""
    toolbox = McpToolbox(timeout)
    try:
        if servers:
            await toolbox.open(servers, taken)
        yield toolbox
    finally:
        await toolbox.close()
