"""Tool calls that small models write as plain JSON instead of their format's markup.

Asked for a tool, Qwen2.5-Coder and others often answer with a fenced or bare JSON object
(```json {"name": "get_weather", "arguments": {"city": "Paris"}} ```) rather than their
template's `<tool_call>` tags. With tools declared, the StreamingProcessor holds back such a
block where a line starts (```json / ``` fences, or a `{`) and hands it here when it closes: it
is a call only when every object in it has the {name, arguments} shape, names a declared tool
and has arguments that fit that tool's schema. Anything else (a JSON answer, another tool's
shape, code) is given back as the content it was.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from mlx_server.parsers.call_objects import call_from_object
from mlx_server.parsers.lenient_json import arguments_object, loads_lenient, strict_loads, strip_fence
from mlx_server.schemas.openai import ToolCall
from mlx_server.services.pipeline.request import Tool
from mlx_server.services.pipeline.tool_calls import arguments_fit, tool_schemas

# A block longer than this without its end is no call (it is content, decided at this length in
# streaming and batch alike, so content is never held back without bound).
MAX_BLOCK_CHARS = 16384
FENCES = ("```json", "```JSON")
BARE_FENCE = "```\n"
# Where a block may start: the start of a line, after spaces or tabs.
_LINE_START = re.compile(r"^[ \t]*(?=[{`])", re.MULTILINE)
_OPENERS = (*FENCES, BARE_FENCE)


@dataclass
class BlockScan:
    """The scan of one candidate block: how far it was read and, for a bare object, its
    brace depth and whether the scan is inside a JSON string."""

    fence: bool
    pos: int = 0
    depth: int = 0
    in_string: bool = False
    escaped: bool = False

    def end(self, text: str) -> int | None:
        """Where the block ends in `text` (the whole block so far), reading on from where the
        last call stopped; None while it is open."""
        if not self.fence:
            return self._object_end(text)
        newline = text.find("\n")  # a fence closes on a later line than its opener
        if newline < 0:
            return None
        at = text.find("```", max(self.pos, newline + 1))
        self.pos = max(newline + 1, len(text) - 2)  # a closing fence may straddle two pieces
        return None if at < 0 else at + 3

    def _object_end(self, text: str) -> int | None:
        for i in range(self.pos, len(text)):
            char = text[i]
            if self.in_string:
                if self.escaped:
                    self.escaped = False
                elif char == "\\":
                    self.escaped = True
                elif char == '"':
                    self.in_string = False
            elif char == '"':
                self.in_string = True
            elif char == "{":
                self.depth += 1
            elif char == "}":
                self.depth -= 1
                if self.depth == 0:
                    return i + 1
        self.pos = len(text)
        return None


def block_start(text: str, at_line_start: bool) -> tuple[int, str] | None:
    """The first place in `text` where a block may start, and its opener: "{", a fence, or ""
    for a fence not decided yet (the text ends inside "```json"); None if there is none.
    `at_line_start`: whether `text` begins a line of the output."""
    for match in _LINE_START.finditer(text):
        if match.start() == 0 and not at_line_start:
            continue
        at, rest = match.end(), text[match.end() :]
        if rest.startswith("{"):
            return at, "{"
        opener = next((f for f in _OPENERS if rest.startswith(f)), None)
        if opener is not None:
            return at, opener
        if any(f.startswith(rest) for f in _OPENERS):
            return at, ""  # "`", "``", "```" or "```js" at the end: wait for more
    return None


class JsonCallReader:
    """Per-request: the declared tools' schemas, and which JSON blocks are calls to them."""

    def __init__(self, tools: Sequence[Tool]) -> None:
        self._schemas = tool_schemas(tools)

    def read(self, block: str, *, closed: bool) -> list[Any]:
        """The calls `block` holds (all of it must be calls), else []. An unclosed block (the
        output ended inside it) counts only when its JSON is complete."""
        body = strip_fence(block)
        if not closed:
            try:
                strict_loads(body)
            except (ValueError, RecursionError):
                return []
        value = loads_lenient(body)
        items = value if isinstance(value, list) else [value]
        calls: list[ToolCall] = []
        for item in items:
            call = call_from_object(item, require_arguments=True)
            if call is None or not self._fits(call):
                return []
            calls.append(call)
        return calls

    def _fits(self, call: ToolCall) -> bool:
        schema = self._schemas.get(call.function.name)
        arguments = arguments_object(call.function.arguments)
        return schema is not None and arguments is not None and arguments_fit(arguments, schema)
