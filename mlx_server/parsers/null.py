"""Parsers for models without tool calls or reasoning blocks: they never match."""

from __future__ import annotations

from mlx_server.parsers.base import ThinkingParser, ToolCallParser
from mlx_server.schemas.openai import ToolCall


class NullToolParser(ToolCallParser):
    parser_id = "null"

    @property
    def stream_markers(self) -> list[tuple[str, str]]:
        return []

    def extract_calls(self, text: str) -> list[ToolCall]:
        return []

    def render_calls(self, calls: list[ToolCall]) -> str:
        return ""


class NullThinkingParser(ThinkingParser):
    parser_id = "null"

    @property
    def stream_markers(self) -> list[tuple[str, str]]:
        return []

    def extract(self, text: str) -> str | None:
        return None

    def remove(self, text: str) -> str:
        return text
