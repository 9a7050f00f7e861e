"""Hermes JSON tool calls: `<tool_call>{"name": ..., "arguments": {...}}</tool_call>`.

The format of Nous Hermes 2 Pro / Hermes 3, Qwen2.5 and Qwen3 (their chat templates ask for
exactly this), SmolLM and many fine-tunes. Quantized models often drop the tags and write the
bare object (or an array of them) as their whole answer; `leading_markers` lets the
StreamingProcessor hold such an output back and try it here.
"""

from __future__ import annotations

import json
from typing import Any

from mlx_server.parsers.base import ToolCallParser
from mlx_server.parsers.call_objects import calls_from_json
from mlx_server.parsers.grammar.blocks import call_object_schema, json_rule, literal, repeated
from mlx_server.parsers.lenient_json import call_arguments, loads_lenient
from mlx_server.parsers.tagged import ends_inside_json_string, tagged_blocks
from mlx_server.schemas.openai import ToolCall

OPEN = "<tool_call>"
CLOSE = "</tool_call>"


class HermesJsonParser(ToolCallParser):
    parser_id = "hermes_json"

    @property
    def stream_markers(self) -> list[tuple[str, str]]:
        return [(OPEN, CLOSE)]

    @property
    def leading_markers(self) -> list[str]:
        return ["{", "["]

    def marker_inside_call(self, body: str) -> bool:
        # A model may write "</tool_call>" inside an argument (code, or a small model's slip
        # that a grammar allows: strings may hold any text); the call ends after its JSON.
        return ends_inside_json_string(body)

    def extract_calls(self, text: str) -> list[ToolCall]:
        if OPEN in text:
            calls: list[ToolCall] = []
            for _, body, _closed in tagged_blocks(text, OPEN, CLOSE, inside=self.marker_inside_call):
                calls.extend(calls_from_json(loads_lenient(body), require_arguments=False))
            return calls
        bare = text.lstrip()
        if bare.startswith(("{", "[")):
            # Without tags, only an object that names its arguments is a call: a JSON answer
            # such as {"name": "Ada", "age": 36} must stay content.
            return calls_from_json(loads_lenient(bare), require_arguments=True)
        return []

    def render_calls(self, calls: list[ToolCall]) -> str:
        # Qwen2.5/Qwen3 templates: one block per call, the JSON on its own line.
        return "\n".join(
            OPEN
            + "\n"
            + json.dumps({"name": call.function.name, "arguments": call_arguments(call)}, ensure_ascii=False)
            + "\n"
            + CLOSE
            for call in calls
        )

    def call_grammar(self, tools: list[dict[str, Any]], *, parallel: bool) -> str | None:
        return "\n".join(
            [
                repeated("call", parallel=parallel),
                f"call: {literal(OPEN + chr(10))} body {literal(chr(10) + CLOSE)}",
                f"body: {json_rule(call_object_schema(tools))}",
            ]
        )
