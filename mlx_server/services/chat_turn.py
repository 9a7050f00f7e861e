"""One assistant turn: the model's text routed into content, reasoning and checked tool calls,
as OpenAI deltas while streaming and as the final message."""

from __future__ import annotations

from typing import Any

from mlx_server.models.adapters import ModelAdapter
from mlx_server.parsers.base import ThinkingParser
from mlx_server.schemas.openai import ToolCall
from mlx_server.services import openai_format as fmt
from mlx_server.services.generation import TokenLogprob
from mlx_server.services.streaming import StreamEvent, StreamingProcessor
from mlx_server.services.tool_calls import ToolCallChecker


def opens_thinking(prompt: str, parser: ThinkingParser) -> bool:
    """Whether the chat template already opened a reasoning block (the reply starts inside it)."""
    tail = prompt.rstrip()
    return any(start.strip() and tail.endswith(start.strip()) for start, _ in parser.stream_markers)


def forced_tool(tool_choice: str | dict[str, Any] | None) -> str | None:
    """The function a named tool_choice requires, if any."""
    if isinstance(tool_choice, dict):
        function = tool_choice.get("function")
        name = function.get("name") if isinstance(function, dict) else None
        return name if isinstance(name, str) else None
    return None


class ChatTurn:
    def __init__(
        self,
        adapter: ModelAdapter,
        *,
        prompt: str,
        tools: list[dict[str, Any]] | None,
        tool_choice: str | dict[str, Any] | None,
        logprobs: bool,
        constrained_calls: bool = False,
    ) -> None:
        self._processor = StreamingProcessor(
            adapter.tool_parser,
            adapter.thinking_parser,
            tools_declared=bool(tools),
            starts_in_thinking=opens_thinking(prompt, adapter.thinking_parser),
        )
        self._checker = ToolCallChecker(tools if tool_choice != "none" else None, strict=constrained_calls)
        # Without tools a call-shaped reply cannot be a call: it is the model's text, kept as content.
        self._no_tools = not tools or tool_choice == "none"
        self._tool_parser = adapter.tool_parser
        self._calls_as_text: list[str] = []
        self._constrained_calls = constrained_calls
        self._tool_choice = tool_choice
        self._logprobs = logprobs
        self._pending: list[TokenLogprob] = []
        self.calls: list[ToolCall] = []

    # --- Streaming ---

    def feed(self, text: str, logprobs: list[TokenLogprob]) -> list[dict[str, Any]]:
        """Choice dicts (delta + logprobs) for one piece of generated text."""
        self._pending.extend(logprobs)
        return self._choices(self._processor.feed(text))

    def finish(self) -> list[dict[str, Any]]:
        return self._choices(self._processor.finish())

    def _choices(self, events: list[StreamEvent]) -> list[dict[str, Any]]:
        choices: list[dict[str, Any]] = []
        for event in events:
            if event.kind == "tool_call" and event.tool_call is not None and self._no_tools:
                text = self._tool_parser.render_calls([event.tool_call])
                self._calls_as_text.append(text)
                choices.append({"delta": {"content": text}, "logprobs": None, "finish_reason": None})
                continue
            if event.kind == "tool_call" and event.tool_call is not None:
                choices.extend(self._tool_call_deltas(event.tool_call))
                continue
            key = "content" if event.kind == "content" else "reasoning_content"
            choices.append(
                {"delta": {key: event.text}, "logprobs": self._take_logprobs(), "finish_reason": None}
            )
        return choices

    def _take_logprobs(self) -> dict[str, Any] | None:
        if not self._logprobs or not self._pending:
            return None
        pending, self._pending = self._pending, []
        return fmt.chat_logprobs(pending)

    def _tool_call_deltas(self, call: ToolCall) -> list[dict[str, Any]]:
        """OpenAI's shape: id, type and name first (empty arguments), then the arguments."""
        checked = self._checker.check(call)
        if checked is None:
            return []
        index = len(self.calls)
        self.calls.append(checked)
        head = {
            "index": index,
            "id": checked.id,
            "type": "function",
            "function": {"name": checked.function.name, "arguments": ""},
        }
        body = {"index": index, "function": {"arguments": checked.function.arguments}}
        return [
            {"delta": {"tool_calls": [head]}, "logprobs": None, "finish_reason": None},
            {"delta": {"tool_calls": [body]}, "logprobs": None, "finish_reason": None},
        ]

    @property
    def rejected_calls(self) -> list[tuple[ToolCall, str]]:
        """Calls the model wrote that were dropped (undeclared tool, arguments not JSON), with why."""
        return self._checker.rejected_calls

    @property
    def done(self) -> bool:
        """Whether generating more is pointless: under a call grammar the model repeats a call
        it already made (small models loop), so the turn is complete."""
        return self._constrained_calls and self._checker.repeated

    # --- The end of the turn ---

    def finish_reason(self, generation_reason: str | None) -> str | None:
        return "tool_calls" if self.calls else generation_reason

    def warnings(self) -> list[str]:
        """What the client asked for but the model did not do (never papered over with a fake call)."""
        required = self._tool_choice == "required" or forced_tool(self._tool_choice) is not None
        if required and not self.calls:
            reasons = "; ".join(self._checker.rejected) or "the reply contains no tool call"
            return [f"tool_choice required a tool call, but the model made none ({reasons})"]
        return []

    def message(self) -> dict[str, Any]:
        result = self._processor.result
        assert result is not None, "finish() first"
        text = result.content.strip() if (self.calls or result.reasoning is not None) else result.content
        if self._calls_as_text:
            text = "\n".join([text.rstrip(), *self._calls_as_text]).strip()
        message: dict[str, Any] = {"role": "assistant", "content": text if text or not self.calls else None}
        if result.reasoning is not None:
            message["reasoning_content"] = result.reasoning.strip()
        if self.calls:
            message["tool_calls"] = [call.model_dump() for call in self.calls]
        return message
