"""Single-pass stream processing (blueprint §7): content, reasoning and tool calls from one pass.

The processor routes the model's text by the adapter's markers as it arrives: reasoning
between thinking markers, tool-call segments withheld until they close (then handed to the
tool parser), everything else content. A marker split across chunks (`<tool` + `_call>`) is
held back, never emitted. Feeding the whole output at once gives exactly what any split gives,
so batch responses use the same path.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from mlx_server.parsers.base import ThinkingParser, ToolCallParser
from mlx_server.schemas.openai import ToolCall
from mlx_server.services.pipeline.json_calls import MAX_BLOCK_CHARS, BlockScan, JsonCallReader, block_start


@dataclass(frozen=True)
class StreamEvent:
    kind: Literal["content", "reasoning", "tool_call"]
    text: str = ""
    tool_call: ToolCall | None = None


@dataclass
class ParseResult:
    content: str
    tool_calls: list[ToolCall] = field(default_factory=list)
    reasoning: str | None = None


def _partial_suffix(text: str, markers: list[str]) -> int:
    """Length of the longest suffix of `text` that is a proper prefix of a marker."""
    best = 0
    for marker in markers:
        for size in range(min(len(marker) - 1, len(text)), best, -1):
            if text.endswith(marker[:size]):
                best = size
                break
    return best


# The "end" of a drop marker: the marker alone is removed.
_DROP = "\x00drop"


def _earliest(text: str, markers: list[tuple[str, str]]) -> tuple[int, str, str] | None:
    found = [(text.find(start), start, end) for start, end in markers if start and start in text]
    return min(found, key=lambda f: (f[0], -len(f[1]))) if found else None


class StreamingProcessor:
    """Per-request state for one generation; the parsers it uses stay stateless."""

    def __init__(
        self,
        tool_parser: ToolCallParser,
        thinking_parser: ThinkingParser,
        *,
        tools_declared: bool = False,
        starts_in_thinking: bool = False,
        json_calls: JsonCallReader | None = None,
    ) -> None:
        """`json_calls`: the declared tools, to take fenced or bare JSON calls to them for calls
        (services/pipeline/json_calls.py), whatever the format's own markup."""
        self._tool_parser = tool_parser
        self._tool_markers = [m for m in tool_parser.stream_markers if m[0]]
        self._think_markers = [m for m in thinking_parser.stream_markers if m[0]]
        self._think_ends_before = thinking_parser.block_ends_before
        self._leading = tool_parser.leading_markers if tools_declared else []
        self._drops = [
            (m, _DROP) for m in dict.fromkeys(tool_parser.drop_markers + thinking_parser.drop_markers)
        ]
        self._buffer = ""
        # Open blocks, innermost last: ("think", end) or ("tool", end); a tool call may sit in a
        # thinking block (some MiniMax and Kimi models call tools while reasoning).
        self._stack: list[tuple[str, str]] = []
        if starts_in_thinking and self._think_markers:
            self._stack.append(("think", self._think_markers[0][1]))
        self._segment = ""
        self._segment_start = 0  # length of the start marker that opened the segment
        self._leading_open = False
        self._decided_start = not self._leading
        self._content: list[str] = []
        self._reasoning: list[str] = []
        # Reasoning blocks are joined with a newline; a new block's separator waits for its text.
        self._block_separator = False
        self._calls: list[ToolCall] = []
        self._json_calls = json_calls
        self._block = BlockScan(fence=False)  # the open JSON block's scan (stack entry "json")
        self._line_start = True  # whether the unrouted text begins a line (JSON blocks start there)
        self.result: ParseResult | None = None

    # --- Feeding ---

    def feed(self, text: str) -> list[StreamEvent]:
        self._buffer += text
        events: list[StreamEvent] = []
        while self._step(events, final=False):
            pass
        return events

    def finish(self) -> list[StreamEvent]:
        """Flush what was held back and set `result`; an unterminated block is taken as it is."""
        events: list[StreamEvent] = []
        while self._step(events, final=True):
            pass
        if self._leading_open:
            segment, self._segment, self._buffer = self._segment + self._buffer, "", ""
            self._leading_open = False
            calls = self._tool_parser.extract(segment)
            if calls:
                self._record(calls, events)
            else:  # not a bare call: route it like any other text (it may hold tagged calls)
                self._buffer = segment
                while self._step(events, final=True):
                    pass
        if self._stack and self._stack[-1][0] == "tool":
            self._stack.pop()
            self._close_segment(self._segment + self._buffer, events, (self._segment_start, 0))
        elif self._buffer:
            self._emit(self._buffer, events)
        self._buffer = ""
        reasoning = "".join(self._reasoning)
        self.result = ParseResult(
            content="".join(self._content),
            tool_calls=list(self._calls),
            # Empty thinking blocks ("<think></think>", a template's "thinking off") are no reasoning.
            reasoning=reasoning if reasoning.strip() else None,
        )
        return events

    # --- One step of routing; True while progress is possible ---

    def _step(self, events: list[StreamEvent], *, final: bool) -> bool:
        if self._stack and self._stack[-1][0] == "json":
            return self._in_json(events, final)
        if not self._buffer:
            return False
        if self._leading_open:
            self._segment += self._buffer
            self._buffer = ""
            return False
        if not self._decided_start and not self._decide_start(final):
            return False
        top = self._stack[-1] if self._stack else None
        if top is not None and top[0] == "tool":
            return self._in_tool(top[1], events)
        markers = self._tool_markers + (self._think_markers if top is None else []) + self._drops
        # A thinking block closes at its end marker (taken out), or where one of the parser's
        # `block_ends_before` starts (left in place: the start of what follows).
        ends = [(top[1], top[1])] if top is not None and top[1] else []
        ends += [(before, "") for before in self._think_ends_before] if top is not None else []
        hit = _earliest(self._buffer, markers)
        if top is None and self._json_calls is not None:
            routed = self._open_json(hit, events, final)
            if routed is not None:
                return routed
        close = _earliest(self._buffer, ends)
        if close is not None and (hit is None or close[0] <= hit[0]):  # the thinking block closes
            at, _, taken = close
            self._emit(self._buffer[:at], events)
            self._buffer = self._buffer[at + len(taken) :]
            self._stack.pop()
            self._line_start = True
            return True
        if hit is not None:
            at, start, end = hit
            rest = self._buffer[at:]
            if not final and any(len(m) > len(rest) and m.startswith(rest) for m, _ in markers):
                # A longer marker may still complete here ("<|start|>assistant" + " to="): wait.
                self._emit(self._buffer[:at], events)
                self._buffer = rest
                return False
            self._emit(self._buffer[:at], events)
            self._buffer = self._buffer[at + len(start) :]
            if end == _DROP:
                return True
            if (start, end) in self._think_markers and top is None:
                self._stack.append(("think", end))
                self._block_separator = bool(self._reasoning)
            else:
                self._stack.append(("tool", end))
                self._segment, self._segment_start = start, len(start)
            return True
        hold = 0 if final else _partial_suffix(self._buffer, [m[0] for m in markers + ends])
        self._emit(self._buffer[: len(self._buffer) - hold], events)
        self._buffer = self._buffer[len(self._buffer) - hold :]
        return False

    def _decide_start(self, final: bool) -> bool:
        """Whether routing goes on: not while the reply may still open with a bare call (one of
        the parser's leading markers), nor once it does (then it is withheld to the end)."""
        stripped = self._buffer.lstrip()
        undecided = not stripped or any(
            len(stripped) < len(m) and m.startswith(stripped) for m in self._leading
        )
        if undecided and not final:
            return False
        self._decided_start = True
        if any(stripped.startswith(m) for m in self._leading):
            self._leading_open = True
            self._segment, self._buffer = self._buffer, ""
            return False
        return True

    def _in_tool(self, end: str, events: list[StreamEvent]) -> bool:
        self._segment += self._buffer
        self._buffer = ""
        if not end:
            return False  # runs to the end of the output
        at = self._segment.find(end, self._segment_start)
        while at >= 0 and self._tool_parser.marker_inside_call(self._segment[self._segment_start : at]):
            at = self._segment.find(end, at + len(end))
        if at < 0:
            return False
        segment, self._buffer = self._segment[: at + len(end)], self._segment[at + len(end) :]
        self._segment = ""
        self._stack.pop()
        self._line_start = True
        self._close_segment(segment, events, inner=(self._segment_start, len(end)))
        return True

    def _close_segment(
        self, segment: str, events: list[StreamEvent], inner: tuple[int, int] = (0, 0)
    ) -> None:
        """Hand a closed (or unterminated) segment to the tool parser.

        Not a call after all: its text goes back in place, without the markers around it (no
        tag ever reaches content).
        """
        calls = self._tool_parser.extract(segment)
        if not calls:
            start, end = inner
            text = self._tool_parser.text_of_non_call(segment)
            if text is None:
                text = segment[start : len(segment) - end]
            # No tag reaches content, nested ones included (a calls section's per-call markers).
            for marker in [m for pair in self._tool_markers for m in pair if m] + [d for d, _ in self._drops]:
                text = text.replace(marker, "")
            self._emit(text, events)
            return
        self._record(calls, events)

    # --- JSON blocks (fenced or bare calls; services/pipeline/json_calls.py) ---

    def _open_json(
        self, hit: tuple[int, str, str] | None, events: list[StreamEvent], final: bool
    ) -> bool | None:
        """Open a JSON block that starts before any marker (True), or wait at a fence not yet
        decided (False); None when no block starts first."""
        found = block_start(self._buffer, self._line_start)
        if found is None or (hit is not None and hit[0] <= found[0]) or (final and not found[1]):
            return None
        at, opener = found
        self._emit(self._buffer[:at], events)
        if not opener:  # an undecided fence at the end: wait for the rest
            self._buffer = self._buffer[at:]
            return False
        self._segment, self._buffer = self._buffer[at:], ""
        self._stack.append(("json", opener))
        self._block = BlockScan(fence=opener != "{")
        return True

    def _in_json(self, events: list[StreamEvent], final: bool) -> bool:
        """Read the open block on; a call when it closes (or the output ends) holding calls to
        declared tools, else its opener is content and the rest is routed again."""
        assert self._json_calls is not None
        self._segment += self._buffer
        self._buffer = ""
        end = self._block.end(self._segment)
        too_long = (end or len(self._segment)) > MAX_BLOCK_CHARS
        if end is None and not too_long and not final:
            return False
        calls: list[ToolCall] = []
        if not too_long:
            block = self._segment if end is None else self._segment[:end]
            calls = self._json_calls.read(block, closed=end is not None)
        opener = self._stack.pop()[1]
        if calls:
            self._buffer = self._segment[end:] if end is not None else ""
            self._record(calls, events)
            self._line_start = True
        else:
            self._emit(opener, events)
            self._buffer = self._segment[len(opener) :]
        self._segment = ""
        return True

    def _record(self, calls: list[ToolCall], events: list[StreamEvent]) -> None:
        for call in calls:
            self._calls.append(call)
            events.append(StreamEvent("tool_call", tool_call=call))

    def _emit(self, text: str, events: list[StreamEvent]) -> None:
        if not text:
            return
        if self._stack and self._stack[-1][0] == "think":
            if self._block_separator:
                text, self._block_separator = "\n" + text, False
            self._reasoning.append(text)
            events.append(StreamEvent("reasoning", text))
        else:
            self._content.append(text)
            events.append(StreamEvent("content", text))
            line = text.rstrip(" \t")
            if line:
                self._line_start = line.endswith("\n")


def parse_output(
    text: str,
    tool_parser: ToolCallParser,
    thinking_parser: ThinkingParser,
    *,
    tools_declared: bool = False,
    starts_in_thinking: bool = False,
    json_calls: JsonCallReader | None = None,
) -> ParseResult:
    """The batch result: the processor fed the whole output at once."""
    processor = StreamingProcessor(
        tool_parser,
        thinking_parser,
        tools_declared=tools_declared,
        starts_in_thinking=starts_in_thinking,
        json_calls=json_calls,
    )
    processor.feed(text)
    processor.finish()
    assert processor.result is not None
    return processor.result
