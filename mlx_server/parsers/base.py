"""Parser contracts (blueprint §5.1) and what every parser shares.

Parsers are stateless strategy objects shared by every request of a model: streaming
state lives in the request's StreamingProcessor, never here, so concurrent requests cannot mix.

How the StreamingProcessor uses a ToolCallParser (and so what `extract` receives):
- Text between a `stream_markers` start and its end (end "" = up to the end of the output) is
  withheld from content. When the segment closes, `extract(segment)` runs on it, markers
  included; if it yields no call, the segment is given back as content, in place.
- A segment the output ends inside (no end marker: a truncated or sloppy call) is passed as is.
- With tools declared, an output whose first non-blank text starts with one of
  `leading_markers` (e.g. "{" or "[" for a bare call written without its tags) is withheld to
  the end and tried with `extract`; if it yields nothing, it is content.
- `drop_markers` (of either parser) are removed from content and reasoning wherever they occur.
- Where markers overlap, the earliest match wins, and of those starting at the same place the
  longest.
"""

from __future__ import annotations

import json
import logging
import uuid
from abc import ABC, abstractmethod
from typing import Any, ClassVar

from mlx_server.schemas.openai import FunctionCall, ToolCall

logger = logging.getLogger("mlx_server.parsers")


def new_call_id() -> str:
    return f"call_{uuid.uuid4().hex[:24]}"


def make_tool_call(name: str, arguments: Any) -> ToolCall:
    """The canonical ToolCall; `arguments` (a dict, or JSON text) becomes compact JSON text."""
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments) if arguments.strip() else {}
        except ValueError:
            return ToolCall(id=new_call_id(), function=FunctionCall(name=name, arguments=arguments))
    text = json.dumps(arguments if arguments is not None else {}, ensure_ascii=False)
    return ToolCall(id=new_call_id(), function=FunctionCall(name=name, arguments=text))


class Parser(ABC):
    """What tool and thinking parsers share: their id and the markers the StreamingProcessor
    routes by."""

    # Identifier stored in the database (e.g. 'hermes_json', 'think_tag'); the registry's key.
    parser_id: ClassVar[str]

    @property
    @abstractmethod
    def stream_markers(self) -> list[tuple[str, str]]:
        """(start, end) marker pairs that delimit a call (or reasoning) in the output; end "" =
        to the end."""

    @property
    def drop_markers(self) -> list[str]:
        """Control text that is never content or reasoning (harmony's message headers); removed
        wherever it is."""
        return []


class ToolCallParser(Parser):
    """Extracts tool calls in one output format, in streaming and batch mode alike."""

    @property
    def leading_markers(self) -> list[str]:
        """Starts of an output that may be a call written without markers (recovery)."""
        return []

    def marker_inside_call(self, body: str) -> bool:
        """Whether an end marker that follows `body` (a call's text so far) is part of the call,
        e.g. inside a JSON string, so the call runs on to the next one."""
        return False

    def extract(self, text: str) -> list[ToolCall]:
        """Every tool call in `text`, in order; [] for text that holds none. Never raises: model
        output is arbitrary (a parse error, or nesting deeper than Python's stack, means there
        is no usable call), and a parser must never fail a response."""
        try:
            return self.extract_calls(text)
        except Exception:
            logger.debug(
                "%s could not read the output; taking it as holding no call", self.parser_id, exc_info=True
            )
            return []

    @abstractmethod
    def extract_calls(self, text: str) -> list[ToolCall]:
        """Every tool call in `text`, in order (`extract` without its guard)."""

    def call_grammar(self, tools: list[dict[str, Any]], *, parallel: bool) -> str | None:
        """A grammar (llguidance Lark, see parsers/grammar/) for a reply that is only calls to
        `tools` in this format, with arguments matching each tool's schema; None if this format
        cannot be constrained. What it accepts, `extract` must parse."""
        return None

    def text_of_non_call(self, segment: str) -> str | None:
        """What a marked segment that holds no call shows as content (markers included in
        `segment`); None: the processor takes the segment without its start and end markers."""
        return None

    @abstractmethod
    def render_calls(self, calls: list[ToolCall]) -> str:
        """Calls written the way this format's model writes them (history for templates
        without native tool support); `extract(render_calls(calls))` gives them back."""

    def validates(self, text: str, expected_fn: str) -> bool:
        """Whether `text` holds a call to `expected_fn`: the probe's test, same path as inference."""
        return any(call.function.name == expected_fn for call in self.extract(text))


class ThinkingParser(Parser):
    """Extracts reasoning blocks; some models toggle thinking per request via the template."""

    @property
    def block_ends_before(self) -> list[str]:
        """Text that also ends a reasoning block where it starts and is then read as what
        follows (harmony: the next message's header, when the analysis lacks its `<|end|>`)."""
        return []

    @property
    def supports_toggle(self) -> bool:
        """Whether the chat template takes `enable_thinking` for models of this format."""
        return False

    @abstractmethod
    def extract(self, text: str) -> str | None:
        """The reasoning in `text`, or None if there is none."""

    @abstractmethod
    def remove(self, text: str) -> str:
        """`text` without its reasoning blocks."""

    def validates(self, text: str) -> bool:
        """Whether `text` holds reasoning in this format: the probe's test, same path as inference.

        A prompt that opened the block itself (it ends with the opening marker) leaves only the
        reasoning and the closing marker in the output; the caller passes the marker + output.
        """
        return self.extract(text) is not None
