"""MCP tools in a real browser with the real SmolLM2: the test MCP server (tests/fixtures/mcp_server.py)
registered on the MCP servers page over stdio and over streamable HTTP, its tool listed on its
card, enabled in a conversation's panel, called by the playground's agent loop (a required call),
and its result shown on the tool card."""

from __future__ import annotations

import asyncio
import json
import re
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect
from sqlmodel import Session, select

from mlx_manager.records import McpServer
from mlx_manager.services.mcp_tools import mcp_toolbox
from mlx_server.database import get_engine
from mlx_server.records import ModelRecord, ModelSource
from tests.browser.support import SECONDS, browse, screenshot
from tests.fixtures.mcp_server import http_server
from tests.support import free_port

# A required call compiles its grammar before the first token; on a busy machine that and the
# two replies of the round can take minutes.
AGENT_SECONDS = 300


@pytest.fixture
def mcp_url(live_server: str, smollm_dir: Path) -> Iterator[str]:
    """The test MCP server over HTTP (lookup_capital only), with SmolLM2 registered as "smol"
    in the live server's database."""
    with Session(get_engine()) as session:
        session.add(ModelRecord(id="smol", source=ModelSource.LOCAL, path=str(smollm_dir)))
        session.commit()
    with http_server(free_port(), "capitals") as url:
        yield url


def _register(page: Page, live_server: str, name: str, transport: str, fields: dict[str, str]) -> None:
    """Add a server on the MCP servers page (`fields` by label); its card lists lookup_capital."""
    page.goto(live_server + "/settings/mcp")
    form = page.locator("#mcp-form")
    form.get_by_label("Name", exact=True).fill(name)
    form.locator('select[name="transport"]').select_option(transport)
    for label, value in fields.items():
        form.get_by_label(label, exact=True).fill(value)
    form.get_by_role("button", name="Add").click()
    expect(page.get_by_role("status").first).to_have_text(f"MCP server '{name}' saved.")
    card = page.locator(f'section.mcp-server[data-server="{name}"]')
    expect(card.locator(".mcp-tool-name")).to_have_text("lookup_capital", timeout=60 * SECONDS)


def _expected(name: str, arguments: str) -> str:
    """What the server itself answers to the model's call, through the SDK (a 135M model's
    choice of country is not the point)."""
    with Session(get_engine()) as session:
        server = session.exec(select(McpServer).where(McpServer.name == name)).one()

    async def call() -> str:
        async with mcp_toolbox([server], set(), 60) as toolbox:
            return (await toolbox.call("lookup_capital", arguments)).content

    return asyncio.run(call())


def _ask(page: Page, live_server: str, server: str) -> tuple[str, str]:
    """A new chat with `server` enabled: the agent loop calls its tool, the card shows a result;
    the call's arguments and the result shown."""
    page.goto(live_server + "/chat")
    page.get_by_role("main").get_by_label("Model").select_option("smol")
    panel = page.locator("details.chat-controls")
    panel.locator("summary").click()
    panel.get_by_label("Temperature").fill("0")
    panel.get_by_label("Max tokens").fill("24")
    for other in ("atlas", "globe"):  # a new chat starts from the last one's settings
        panel.get_by_role("checkbox", name=re.compile(f"^MCP: {other}")).set_checked(other == server)
    panel.get_by_label("Tool choice").select_option("required")
    panel.get_by_label("Max depth").fill("1")  # one tool round, then the answer
    panel.locator("summary").click()
    box = page.get_by_role("textbox", name="Message")
    box.fill("What is the capital of Peru?")
    box.press("Enter")

    card = page.locator("#messages .tool-card").first
    expect(card.locator(".tool-name")).to_have_text("lookup_capital", timeout=AGENT_SECONDS * SECONDS)
    result = card.locator(".tool-result pre")
    expect(result).not_to_be_empty(timeout=AGENT_SECONDS * SECONDS)
    expect(page.locator("#send-button")).to_be_enabled(timeout=AGENT_SECONDS * SECONDS)
    return json.dumps(json.loads(card.locator(".tool-args").inner_text())), result.inner_text()


@pytest.mark.browser
def test_the_agent_loop_calls_an_mcp_tool_over_stdio_and_http_and_shows_its_result(
    live_server: str, chromium: Path, mcp_url: str
) -> None:
    with browse(live_server, chromium) as page:
        args = "\n".join(["-m", "tests.fixtures.mcp_server", "stdio", "capitals"])
        stdio = {"Command": sys.executable, "Arguments (one per line)": args}
        _register(page, live_server, "atlas", "stdio", stdio)
        _register(page, live_server, "globe", "http", {"URL": mcp_url})
        expect(page.locator(".mcp-tool-name")).to_have_count(2, timeout=60 * SECONDS)  # both cards listed
        screenshot(page, "mcp-servers.png")
        shown = {"atlas": _ask(page, live_server, "atlas")}
        screenshot(page, "chat-mcp.png")
        shown["globe"] = _ask(page, live_server, "globe")
    for server, (arguments, result) in shown.items():  # (Playwright's loop is closed now)
        assert result == _expected(server, arguments)
