"""One assistant turn: the model's text routed into content, reasoning and checked tool calls,
as the pipeline's typed events."""

from __future__ import annotations

from mlx_server.models.adapters import ModelAdapter
from mlx_server.parsers.thinking import opens_thinking
from mlx_server.schemas.openai import ToolCall
from mlx_server.services.pipeline.events import (
    FinishReason,
    GenerationEvent,
    Notice,
    ReasoningDelta,
    TextDelta,
    TokenLogprob,
    ToolCallDelta,
    ToolCallDone,
    ToolCallRejected,
    ToolCallStarted,
)
from mlx_server.services.pipeline.json_calls import JsonCallReader
from mlx_server.services.pipeline.request import OutputFormat, Tool, ToolChoice
from mlx_server.services.pipeline.streaming import StreamEvent, StreamingProcessor
from mlx_server.services.pipeline.structured_output import output_problem
from mlx_server.services.pipeline.tool_calls import ToolCallChecker


def rejected_calls_notice(count: int) -> str:
    return "A tool call was rejected" if count == 1 else f"{count} tool calls were rejected"


class ChatTurn:
    """Per-request state between the generated text and the events: the StreamingProcessor
    splits the text, the ToolCallChecker admits calls, and the turn keeps what the end of the
    reply needs (the calls made, the text for the output-format check)."""

    def __init__(
        self,
        adapter: ModelAdapter,
        *,
        prompt: str,
        tools: tuple[Tool, ...] | None,
        tool_choice: ToolChoice,
        output_format: OutputFormat | None = None,
        constrained_calls: bool = False,
        rejected_calls_as_content: bool = True,
    ) -> None:
        self._processor = StreamingProcessor(
            adapter.tool_parser,
            adapter.thinking_parser,
            tools_declared=bool(tools),
            starts_in_thinking=opens_thinking(prompt, adapter.thinking_parser),
            json_calls=JsonCallReader(tools) if tools and tool_choice.offers_tools else None,
        )
        self._checker = ToolCallChecker(tools if tool_choice.offers_tools else None, strict=constrained_calls)
        # Without tools a call-shaped reply cannot be a call: it is the model's text, kept as content.
        self._no_tools = not tools or not tool_choice.offers_tools
        self._tool_parser = adapter.tool_parser
        self._constrained_calls = constrained_calls
        # A call the checker refuses is the model's text after all: returned as content (what
        # vLLM does when parsing fails), so a reply never ends empty without a word. The
        # playground's loop feeds the refusal back to the model instead (chat_runner.py).
        self._rejected_as_content = rejected_calls_as_content
        self._tool_choice = tool_choice
        self._output_format = output_format
        self._pending: list[TokenLogprob] = []
        self._text: list[str] = []
        self._raw = ""  # everything the model wrote, markup included
        self._reasoned = False
        self.calls: list[ToolCall] = []

    def feed(self, text: str, logprobs: list[TokenLogprob]) -> list[GenerationEvent]:
        """The events one piece of generated text completes."""
        self._pending.extend(logprobs)
        self._raw += text
        return self._events(self._processor.feed(text))

    def finish(self, generation_reason: FinishReason | None) -> list[GenerationEvent]:
        """What is left at the end of the text, the notices, and the finish reason."""
        events = self._events(self._processor.finish())
        if self._pending:  # tokens of call markup: no text of their own, their logprobs still count
            events.append(TextDelta("", tuple(self._take_logprobs())))
        events.extend(Notice(message) for message in self._notices(generation_reason))
        return events

    @property
    def done(self) -> bool:
        """Whether generating more is pointless: under a call grammar the model repeats a call
        it already made (small models loop), so the turn is complete."""
        return self._constrained_calls and self._checker.repeated

    def finish_reason(self, generation_reason: FinishReason | None) -> FinishReason:
        return "tool_calls" if self.calls else generation_reason or "stop"

    def _events(self, parts: list[StreamEvent]) -> list[GenerationEvent]:
        events: list[GenerationEvent] = []
        for part in parts:
            if part.kind == "tool_call" and part.tool_call is not None:
                events.extend(self._call_events(part.tool_call))
            elif part.kind == "content":
                self._text.append(part.text)
                events.append(TextDelta(part.text, tuple(self._take_logprobs())))
            else:
                self._reasoned = self._reasoned or bool(part.text.strip())
                events.append(ReasoningDelta(part.text))
        return events

    def _take_logprobs(self) -> list[TokenLogprob]:
        pending, self._pending = self._pending, []
        return pending

    def _call_events(self, call: ToolCall) -> list[GenerationEvent]:
        """Started (id, name), the arguments, done; or the call as text when no tools were
        offered; or nothing but the rejection when the call is not a valid one."""
        if self._no_tools:
            text = self._tool_parser.render_calls([call])
            self._text.append(text)
            return [TextDelta(text, tuple(self._take_logprobs()))]
        rejected_before = len(self._checker.rejected_calls)
        checked = self._checker.check(call)
        if checked is None:
            rejected = self._checker.rejected_calls[rejected_before:]
            events: list[GenerationEvent] = [ToolCallRejected(c, why) for c, why in rejected]
            if rejected and self._rejected_as_content:
                text = self._tool_parser.render_calls([call])
                self._text.append(text)
                events.append(TextDelta(text, tuple(self._take_logprobs())))
            return events
        index = len(self.calls)
        self.calls.append(checked)
        return [
            ToolCallStarted(index, checked.id, checked.function.name),
            ToolCallDelta(index, checked.function.arguments),
            ToolCallDone(index, checked),
        ]

    def _notices(self, generation_reason: FinishReason | None) -> list[str]:
        """What the client asked for but the model did not do (never papered over with a fake
        call), and why a reply is empty when it is: never silently."""
        required = self._tool_choice.requires_call
        rejected = self._checker.rejected
        text = "".join(self._text).strip()
        if required and not self.calls:
            reasons = "; ".join(rejected) or "the reply contains no tool call"
            return [f"tool_choice required a tool call, but the model made none ({reasons})"]
        notices = []
        if rejected:
            where = "returned as content" if self._rejected_as_content else "not returned"
            reasons = "; ".join(rejected)
            notices.append(f"{rejected_calls_notice(len(rejected))}: {reasons} (its text is {where})")
        elif not text and not self.calls and not self._reasoned and self._raw.strip():
            written = self._raw[:200]
            notices.append(f"The reply has no text and no tool call: the model wrote only {written!r}")
        if self._output_format is not None and not self.calls:
            problem = output_problem(text, self._output_format)
            if problem is not None:
                cause = (
                    "max_tokens ran out first; raise it"
                    if generation_reason == "length"
                    else "please report this"
                )
                notices.append(f"{problem} ({cause})")
        return notices
