"""Issue #30's openai-agents loop, replayed: after a tool result SmolLM2 writes a call of a tool
that was never declared (here the schema's title, `get_stock_price_args`, as openai-agents
names it). The server used to drop it and answer `content: ""`, `finish_reason: "stop"`; now the
model's text is the content and the rejection is said: the x-tool-calls-rejected header (whole
replies), the finish chunk's `warnings` (streams) and the audit row."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx

from tests.support import ServerProcess

RECORDED = json.loads((Path(__file__).parent / "data" / "openai_agents_tool_loop.json").read_text())
REASON = "'get_stock_price_args' is not a declared tool"


def test_the_recorded_loop_ends_with_the_models_text_and_a_visible_rejection(
    inference_server: ServerProcess,
) -> None:
    started = datetime.now(UTC)
    url = f"{inference_server.url}/v1/chat/completions"
    whole = httpx.post(url, json=RECORDED, timeout=300)
    assert whole.status_code == 200
    choice = whole.json()["choices"][0]
    assert choice["message"]["content"] and "get_stock_price_args" in choice["message"]["content"]
    assert choice["finish_reason"] == "stop" and "tool_calls" not in choice["message"]
    assert whole.headers["x-tool-calls-rejected"] == REASON
    assert REASON in whole.json()["warnings"][0]

    with httpx.stream("POST", url, json={**RECORDED, "stream": True}, timeout=300) as stream:
        assert "x-tool-calls-rejected" not in stream.headers  # sent before the reply existed
        chunks = [json.loads(line[6:]) for line in stream.iter_lines() if line.startswith("data: {")]
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    assert text.strip() == choice["message"]["content"]
    finish = next(c for c in chunks if c["choices"] and c["choices"][0]["finish_reason"])
    assert REASON in finish["warnings"][0]

    rows = _audit_rows(inference_server.url, started, 2)
    assert [REASON in (row["warnings"] or [""])[0] for row in rows] == [True, True]


def _audit_rows(url: str, since: datetime, count: int) -> list[dict[str, Any]]:
    query = {"endpoint": "POST /v1/chat/completions", "since": since.isoformat()}
    deadline = time.monotonic() + 10
    while True:
        rows: list[dict[str, Any]] = httpx.get(f"{url}/v1/admin/audit", params=query).json()["data"]
        if len(rows) >= count or time.monotonic() > deadline:
            return rows
        time.sleep(0.1)
