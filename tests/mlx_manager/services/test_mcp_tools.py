"""MCP tools through the official SDK against the test server (tests/fixtures/mcp_server.py):
listed and called over stdio and streamable HTTP, a server that exits at start reported with
its secrets masked (one that never answers: tests/mlx_manager/routers/test_mcp.py), and no stdio
process left behind."""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Iterator

import psutil
import pytest

from mlx_manager.records import McpServer, McpTransport
from mlx_manager.services.mcp_tools import McpUnavailable, list_server_tools, mcp_toolbox
from tests.fixtures.mcp_server import http_server
from tests.support import free_port

TIMEOUT = 3.0  # seconds: short, so the failing servers fail fast
# A working stdio server starts in ~1-3 s here (Python importing the SDK), longer when busy.
START = 30.0
# What a failure may take beyond the timeout: the stdio shutdown and a busy machine.
SLACK = 3.0
SECRET = "s3cret-greeting-value"


def stdio(mode: str = "stdio", name: str = "fixture", **env: str) -> McpServer:
    return McpServer(
        id=1,
        name=name,
        transport=McpTransport.STDIO,
        command=sys.executable,
        args=["-m", "tests.fixtures.mcp_server", mode],
        env=env,
    )


def http(url: str, name: str = "web") -> McpServer:
    return McpServer(
        id=2, name=name, transport=McpTransport.HTTP, url=url, headers={"Authorization": "Bearer " + SECRET}
    )


@pytest.fixture(scope="module")
def http_url() -> Iterator[str]:
    with http_server(free_port()) as url:
        yield url


def _stdio_processes() -> list[psutil.Process]:
    """The fixture's stdio servers still running (the module's HTTP server is not one)."""
    return [
        process
        for process in psutil.Process().children(recursive=True)
        if process.cmdline()[-2:-1] == ["tests.fixtures.mcp_server"]
    ]


def test_tools_are_listed_over_stdio_and_http(http_url: str) -> None:
    for server in (stdio(), http(http_url)):
        tools = asyncio.run(list_server_tools(server, START))
        assert [t.name for t in tools] == ["lookup_capital", "add", "greeting"]
        capital = tools[0]
        assert capital.parameters["properties"]["country"]["type"] == "string"
        assert capital.parameters["required"] == ["country"]
        assert capital.description == "The capital city of a country."
    assert _stdio_processes() == []  # the stdio server ended with its connection


@pytest.mark.parametrize("transport", ["stdio", "http"])
def test_the_agent_loops_toolbox_calls_tools_and_reports_their_errors(transport: str, http_url: str) -> None:
    server = stdio(FIXTURE_GREETING="hello") if transport == "stdio" else http(http_url)

    async def run() -> list[tuple[str, bool]]:
        async with mcp_toolbox([server], {"add"}, START) as toolbox:
            assert toolbox.problems == []
            names = [d.name for d in toolbox.definitions()]
            # `add` is taken (a built-in or user tool, say): it is offered under its server's name.
            assert names == ["lookup_capital", f"{server.name}_add", "greeting"]
            calls = [
                ("lookup_capital", '{"country": "Peru"}'),
                (f"{server.name}_add", '{"a": 2, "b": 40}'),
                ("lookup_capital", '{"country": "Atlantis"}'),
                (f"{server.name}_add", '{"a": 2, "b": "x"}'),
                ("greeting", "{}"),
            ]
            return [((r := await toolbox.call(n, a)).content, r.is_error) for n, a in calls]

    lima, sum_, unknown, bad, greeting = asyncio.run(run())
    assert lima == ("Lima", False)
    assert sum_ == ("42", False)
    assert unknown[1] and "no capital known for 'Atlantis'" in unknown[0]
    assert bad[1] and "b: 'x' is not of type 'integer'" in bad[0]  # refused before the call
    # The registered env reaches a stdio server.
    assert greeting == ("hello" if transport == "stdio" else "unset", False)
    assert _stdio_processes() == []


def _failure(server: McpServer) -> tuple[str, float]:
    started = time.monotonic()
    with pytest.raises(McpUnavailable) as caught:
        asyncio.run(list_server_tools(server, TIMEOUT))
    return str(caught.value), time.monotonic() - started


def test_a_server_that_exits_at_start_says_so_with_its_stderr_and_secrets_masked() -> None:
    message, seconds = _failure(stdio("exit", FIXTURE_GREETING=SECRET))
    assert message.startswith("fixture closed the connection (the server exited or dropped it)")
    assert "it said: fixture: FIXTURE_GREETING=**** is not accepted, exiting" in message
    assert SECRET not in message
    assert seconds < TIMEOUT + SLACK
    assert _stdio_processes() == []


def test_a_command_that_does_not_exist_and_a_closed_port_say_what_failed() -> None:
    missing = McpServer(id=3, name="missing", transport=McpTransport.STDIO, command="/nonexistent/mcp-server")
    assert (
        _failure(missing)[0]
        == "missing could not be started ('/nonexistent/mcp-server': No such file or directory)"
    )
    closed = f"http://user:{SECRET}@127.0.0.1:{free_port()}/mcp"
    message = _failure(http(closed, name="closed"))[0]
    assert message.startswith(
        f"closed could not be reached at http://127.0.0.1:{closed.rsplit(':', 1)[1]} (ConnectError"
    )
    assert SECRET not in message


def test_a_server_that_fails_leaves_the_others_usable(http_url: str) -> None:
    async def run() -> tuple[list[str], str]:
        async with mcp_toolbox([stdio("exit", name="broken"), http(http_url)], set(), START) as toolbox:
            return toolbox.problems, (await toolbox.call("lookup_capital", '{"country": "Japan"}')).content

    problems, tokyo = asyncio.run(run())
    assert len(problems) == 1 and problems[0].startswith("MCP server broken: broken closed the connection")
    assert tokyo == "Tokyo"
