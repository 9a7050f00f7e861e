"""Parser ids (as stored in ModelCapabilities) to parser classes (blueprint §5.3).

Ids are what the database stores, so renaming one needs a data migration; adding one does not.
docs/PARSERS.md documents every format with an example.
"""

from __future__ import annotations

from typing import TypeVar

from mlx_server.parsers.base import ThinkingParser, ToolCallParser
from mlx_server.parsers.deepseek import DeepSeekParser
from mlx_server.parsers.gemma import Gemma4Parser
from mlx_server.parsers.glm import Glm4NativeParser, Glm4XmlParser, Glm47Parser
from mlx_server.parsers.harmony import HarmonyParser
from mlx_server.parsers.hermes import HermesJsonParser
from mlx_server.parsers.kimi import KimiK2Parser
from mlx_server.parsers.llama import LlamaPythonParser, LlamaXmlParser
from mlx_server.parsers.minimax import MinimaxM2Parser
from mlx_server.parsers.mistral import MistralParser
from mlx_server.parsers.null import NullThinkingParser, NullToolParser
from mlx_server.parsers.pythonic import PythonicParser
from mlx_server.parsers.qwen3_coder import Qwen3CoderParser
from mlx_server.parsers.thinking import HarmonyThinkingParser, MistralThinkParser, ThinkTagParser

TOOL_PARSERS: dict[str, type[ToolCallParser]] = {
    "hermes_json": HermesJsonParser,
    "glm4_native": Glm4NativeParser,
    "glm4_xml": Glm4XmlParser,
    "glm47": Glm47Parser,
    "llama_xml": LlamaXmlParser,
    "llama_python": LlamaPythonParser,
    "mistral": MistralParser,
    "qwen3_coder": Qwen3CoderParser,
    "pythonic": PythonicParser,
    "deepseek": DeepSeekParser,
    "harmony": HarmonyParser,
    "kimi_k2": KimiK2Parser,
    "minimax_m2": MinimaxM2Parser,
    "gemma4": Gemma4Parser,
    "null": NullToolParser,
}

THINKING_PARSERS: dict[str, type[ThinkingParser]] = {
    "think_tag": ThinkTagParser,
    "mistral_think": MistralThinkParser,
    "harmony_analysis": HarmonyThinkingParser,
    "null": NullThinkingParser,
}


class UnknownParserError(KeyError):
    pass


_P = TypeVar("_P", ToolCallParser, ThinkingParser)


def _resolve(registry: dict[str, type[_P]], kind: str, parser_id: str) -> _P:
    try:
        return registry[parser_id]()
    except KeyError:
        raise UnknownParserError(
            f"unknown {kind} parser {parser_id!r}; known: {', '.join(sorted(registry))}"
        ) from None


def resolve_tool_parser(parser_id: str) -> ToolCallParser:
    return _resolve(TOOL_PARSERS, "tool", parser_id)


def resolve_thinking_parser(parser_id: str) -> ThinkingParser:
    return _resolve(THINKING_PARSERS, "thinking", parser_id)
