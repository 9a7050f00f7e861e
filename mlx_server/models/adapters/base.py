"""The adapter contract (blueprint §6.1): chat template, stop tokens, tools, message conversion.

An adapter is created once when its model loads and dies with it. It composes a tool-call
parser and a thinking parser and pre-computes everything a request needs, so inference does
no detection.
"""

from __future__ import annotations

import functools
import json
from abc import ABC, abstractmethod
from typing import Any, ClassVar

from jinja2 import TemplateError
from llguidance import LLTokenizer

from mlx_server.parsers.base import ThinkingParser, ToolCallParser, make_tool_call
from mlx_server.records import ModelCapabilities


class ChatTemplateError(ValueError):
    """The model's chat template refused the conversation; the message says why."""


def content_text(content: Any) -> str:
    """OpenAI content (a string, null, or a list of parts) as plain text."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    texts: list[str] = []
    for part in content:
        kind = part.get("type") if isinstance(part, dict) else None
        if kind == "text":
            texts.append(str(part.get("text", "")))
        else:
            raise ChatTemplateError(f"content parts of type {kind!r} need a vision model; send text parts")
    return "\n".join(texts)


def content_with_images(content: Any) -> str | list[dict[str, Any]]:
    """OpenAI content for a vision model's template: plain text when it has no image, else the
    parts in order as `{"type": "text", "text": ...}` and `{"type": "image"}` (the form the
    Qwen2.5-VL, Gemma 3 and SmolVLM templates read; the pixels travel beside the prompt)."""
    if not isinstance(content, list) or not any(
        isinstance(part, dict) and part.get("type") == "image_url" for part in content
    ):
        return content_text(content)
    return [
        {"type": "image"}
        if part.get("type") == "image_url"
        else {"type": "text", "text": content_text([part])}
        for part in content
    ]


def joined_content(
    first: str | list[dict[str, Any]], second: str | list[dict[str, Any]], separator: str = "\n\n"
) -> str | list[dict[str, Any]]:
    """Two messages' converted content as one: text joined by `separator`, or the parts of both
    in order when either holds images."""
    if isinstance(first, str) and isinstance(second, str):
        return f"{first}{separator}{second}"

    def parts(content: str | list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [{"type": "text", "text": content}] if isinstance(content, str) else content

    return [*parts(first), {"type": "text", "text": separator}, *parts(second)]


class ModelAdapter(ABC):
    """Stateful adapter, one instance per loaded model."""

    # Tokens that end a reply in this family, besides the tokenizer's eos ids; only those
    # present in the vocabulary are used.
    stop_token_strings: ClassVar[tuple[str, ...]] = ()
    # A vision model's adapter: image parts reach the chat template (set by create_adapter).
    accepts_images: bool = False

    def __init__(
        self,
        tokenizer: Any,
        tool_parser: ToolCallParser,
        thinking_parser: ThinkingParser,
        capabilities: ModelCapabilities | None = None,
    ) -> None:
        self.tokenizer = tokenizer
        self.tool_parser = tool_parser
        self.thinking_parser = thinking_parser
        self.capabilities = capabilities
        vocabulary: dict[str, int] = tokenizer.get_vocab()  # built anew by every call: ~10-100 ms
        # Token ids run from 0 to vocabulary_size - 1 (request checks: logit_bias, prompt ids).
        self.vocabulary_size = len(vocabulary)
        self._stop_token_ids: list[int] = self._compute_stop_tokens(vocabulary)

    # --- Identity ---

    @property
    @abstractmethod
    def family(self) -> str: ...

    # --- Chat template ---

    @property
    def has_chat_template(self) -> bool:
        return bool(getattr(self.tokenizer, "chat_template", None))

    def apply_chat_template(
        self,
        messages: list[dict[str, Any]],
        *,
        tools: list[dict[str, Any]] | None = None,
        enable_thinking: bool | None = None,
        add_generation_prompt: bool = True,
    ) -> str:
        """Render converted messages into the prompt text, ending with the assistant's turn
        (unless `add_generation_prompt` is False: /tokenize may ask for the messages alone)."""
        if not self.has_chat_template:
            raise ChatTemplateError(
                "this model has no chat template; send a plain prompt to /v1/completions instead"
            )
        kwargs: dict[str, Any] = {"add_generation_prompt": add_generation_prompt, "tokenize": False}
        if tools and self.supports_native_tools():
            kwargs["tools"] = tools
        if enable_thinking is not None and self.thinking_parser.supports_toggle:
            kwargs["enable_thinking"] = enable_thinking
        try:
            prompt = self.tokenizer.apply_chat_template(messages, **kwargs)
        except TemplateError as exc:
            raise ChatTemplateError(f"the model's chat template rejected the messages: {exc}") from exc
        return str(prompt)

    # --- Stop tokens (pre-computed) ---

    def get_stop_tokens(self) -> list[int]:
        return self._stop_token_ids

    def _compute_stop_tokens(self, vocab: dict[str, int]) -> list[int]:
        ids = set(getattr(self.tokenizer, "eos_token_ids", None) or ())
        eos = getattr(self.tokenizer, "eos_token_id", None)
        if eos is not None:
            ids.add(int(eos))
        ids.update(vocab[token] for token in self.stop_token_strings if token in vocab)
        return sorted(ids)

    # --- Tools ---

    def supports_native_tools(self) -> bool:
        """Whether the chat template renders `tools=` itself (probed, else read off the template)."""
        if self.capabilities is not None and self.capabilities.supports_native_tools is not None:
            return self.capabilities.supports_native_tools
        template = getattr(self.tokenizer, "chat_template", None) or ""
        return isinstance(template, str) and "tools" in template

    def format_tools_for_prompt(self, tools: list[dict[str, Any]]) -> str:
        """Tool definitions as system-prompt text, for templates without native tool support.

        The example call is written by the model's own tool parser, so the model is asked for
        exactly the format that will be parsed.
        """
        listing = "\n".join(json.dumps(tool.get("function", tool), ensure_ascii=False) for tool in tools)
        example = self.tool_parser.render_calls([make_tool_call("tool_name", {"argument": "value"})])
        if not example:
            example = '{"name": "tool_name", "arguments": {"argument": "value"}}'
        return (
            "You can call these tools (JSON Schema definitions):\n"
            f"{listing}\n\n"
            "To call a tool, reply with the call and nothing after it, written exactly like this:\n"
            f"{example}\n"
            "Call a tool only when it helps; otherwise answer directly."
        )

    # --- Message conversion (blueprint §6.4) ---

    def convert_messages(self, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Turn tool results, assistant tool calls and content parts into what the template renders."""
        native = self.supports_native_tools()
        converted: list[dict[str, Any]] = []
        for message in messages:
            message = dict(message)
            role = message.get("role")
            if role == "developer":  # OpenAI's newer name for the system role
                message["role"] = "system"
            content = message.get("content")
            message["content"] = (
                content_with_images(content) if self.accepts_images else content_text(content)
            )
            if role == "tool" and not native:
                call_id = message.get("tool_call_id")
                label = f"Tool result ({call_id})" if call_id else "Tool result"
                message = {"role": "user", "content": joined_content(f"{label}:", message["content"], "\n")}
            elif role == "assistant" and message.get("tool_calls") and not native:
                calls = self._calls_text(message.pop("tool_calls"))
                message["content"] = f"{message['content']}\n{calls}".strip()
            converted.append(message)
        return converted

    # --- Constrained decoding ---

    @functools.cached_property
    def grammar_tokenizer(self) -> LLTokenizer:
        """llguidance's view of the vocabulary, built once per loaded model (~0.3 s).

        Its end-of-sequence tokens are the adapter's stop tokens, so a finished grammar lets
        the model end its turn the way this family does.
        """
        from llguidance.hf import from_tokenizer

        hf_tokenizer = getattr(self.tokenizer, "_tokenizer", self.tokenizer)  # inside mlx-lm's wrapper
        return from_tokenizer(hf_tokenizer, eos_token=self.get_stop_tokens() or None)

    @functools.cached_property
    def grammar_closing_tokens(self) -> tuple[list[int], list[int]]:
        """Tokens that end a JSON string (`"`, `"}`, `"]`...) and tokens that close arrays and
        objects (`]`, `}}`...): what constrained decoding pushes up when max_tokens runs out."""
        tokenizer = self.grammar_tokenizer
        quotes: list[int] = []
        brackets: list[int] = []
        for token_id in range(tokenizer.vocab_size):
            if tokenizer.is_special_token(token_id):
                continue
            text = tokenizer.decode_str([token_id]).strip()
            if text.startswith('"') and set(text) <= {'"', "]", "}"}:
                quotes.append(token_id)
            elif text and set(text) <= {"]", "}"}:
                brackets.append(token_id)
        return quotes, brackets

    def add_system_text(self, messages: list[dict[str, Any]], text: str) -> list[dict[str, Any]]:
        """Converted messages with `text` added to the system prompt (tool definitions, a
        required-call instruction)."""
        if messages and messages[0].get("role") == "system":
            first = messages[0]
            return [{**first, "content": f"{first['content']}\n\n{text}"}, *messages[1:]]
        return [{"role": "system", "content": text}, *messages]

    # --- Streaming integration ---

    def get_stream_markers(self) -> list[tuple[str, str]]:
        """Markers of both parsers, for the single-pass stream processor."""
        return self.tool_parser.stream_markers + self.thinking_parser.stream_markers

    def _calls_text(self, calls: list[dict[str, Any]]) -> str:
        """Earlier assistant tool calls, written in the model's own call format."""
        canonical = []
        for call in calls:
            function = call.get("function") or {}
            canonical.append(make_tool_call(str(function.get("name", "")), function.get("arguments") or "{}"))
        rendered = self.tool_parser.render_calls(canonical)
        if rendered:
            return rendered
        return "\n".join(
            json.dumps(
                {"name": c.function.name, "arguments": json.loads(c.function.arguments)}, ensure_ascii=False
            )
            for c in canonical
        )
