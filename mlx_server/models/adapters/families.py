"""Family adapters (blueprint §6.2): default parsers, stop tokens and template quirks.

The defaults are what each family's current models emit; a probe that finds another working
parser stores its id, and the factory injects that instead.
"""

from __future__ import annotations

from typing import Any, ClassVar

from mlx_server.models.adapters.base import ModelAdapter, joined_content
from mlx_server.parsers.base import ThinkingParser, ToolCallParser
from mlx_server.parsers.gemma import Gemma4Parser
from mlx_server.parsers.glm import Glm4NativeParser
from mlx_server.parsers.hermes import HermesJsonParser
from mlx_server.parsers.llama import LlamaXmlParser
from mlx_server.parsers.mistral import MistralParser
from mlx_server.parsers.null import NullThinkingParser, NullToolParser
from mlx_server.parsers.thinking import ThinkTagParser
from mlx_server.records import ModelCapabilities


class FamilyAdapter(ModelAdapter):
    family_name: ClassVar[str]
    default_tool_parser: ClassVar[type[ToolCallParser]] = NullToolParser
    default_thinking_parser: ClassVar[type[ThinkingParser]] = NullThinkingParser

    def __init__(
        self,
        tokenizer: Any,
        tool_parser: ToolCallParser | None = None,
        thinking_parser: ThinkingParser | None = None,
        capabilities: ModelCapabilities | None = None,
    ) -> None:
        super().__init__(
            tokenizer=tokenizer,
            tool_parser=tool_parser or self.default_tool_parser(),
            thinking_parser=thinking_parser or self.default_thinking_parser(),
            capabilities=capabilities,
        )

    @property
    def family(self) -> str:
        return self.family_name


class QwenAdapter(FamilyAdapter):
    family_name = "qwen"
    default_tool_parser = HermesJsonParser
    default_thinking_parser = ThinkTagParser
    stop_token_strings = ("<|im_end|>", "<|endoftext|>")


class GLM4Adapter(FamilyAdapter):
    family_name = "glm4"
    default_tool_parser = Glm4NativeParser
    default_thinking_parser = ThinkTagParser
    # GLM ends a turn by starting the next speaker's.
    stop_token_strings = ("<|user|>", "<|observation|>", "<|endoftext|>")


class LlamaAdapter(FamilyAdapter):
    family_name = "llama"
    default_tool_parser = LlamaXmlParser
    stop_token_strings = ("<|eot_id|>", "<|eom_id|>", "<|end_of_text|>")


class GemmaAdapter(FamilyAdapter):
    family_name = "gemma"
    default_tool_parser = Gemma4Parser
    stop_token_strings = ("<end_of_turn>", "<eos>")

    def convert_messages(self, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Gemma templates have no system role: the system text opens the first user turn."""
        converted = super().convert_messages(messages)
        system = "\n\n".join(m["content"] for m in converted if m.get("role") == "system")
        rest = [m for m in converted if m.get("role") != "system"]
        return self.add_system_text(rest, system) if system else rest

    def add_system_text(self, messages: list[dict[str, Any]], text: str) -> list[dict[str, Any]]:
        if messages and messages[0].get("role") == "user":
            return [{**messages[0], "content": joined_content(text, messages[0]["content"])}, *messages[1:]]
        return [{"role": "user", "content": text}, *messages]


class MistralAdapter(FamilyAdapter):
    family_name = "mistral"
    default_tool_parser = MistralParser
    stop_token_strings = ("</s>",)

    def convert_messages(self, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Mistral templates require alternating turns: merge consecutive same-role text messages."""
        merged: list[dict[str, Any]] = []
        for message in super().convert_messages(messages):
            previous = merged[-1] if merged else None
            mergeable = previous is not None and not message.get("tool_calls") and message["role"] != "tool"
            if mergeable and previous is not None and previous.get("role") == message["role"]:
                merged[-1] = {**previous, "content": joined_content(previous["content"], message["content"])}
            else:
                merged.append(message)
        return merged


class DefaultAdapter(FamilyAdapter):
    family_name = "default"
    # ChatML and hermes-style <tool_call> JSON are the most common among otherwise unclassified
    # models (SmolLM2 among them); reasoning is not assumed.
    default_tool_parser = HermesJsonParser
    stop_token_strings = ("<|im_end|>", "<|endoftext|>")
