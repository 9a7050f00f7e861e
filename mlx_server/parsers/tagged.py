"""Where calls are in the tagged formats: blocks between a start and an end tag, sections
between begin/end tokens, and whether a JSON body is cut inside a string."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator

from mlx_server.schemas.openai import ToolCall


def tagged_blocks(
    text: str,
    start: str,
    end: str,
    stops: tuple[str, ...] = (),
    inside: Callable[[str], bool] | None = None,
) -> Iterator[tuple[int, str, bool]]:
    """(position, body, closed) for each `start` tag in `text`.

    A body runs to `end` (skipping those `inside` says belong to the body); when that is missing
    (a truncated or sloppy call) it runs to the next `start`, to one of `stops`, or to the end.
    """
    pos = text.find(start)
    while pos != -1:
        body_start = pos + len(start)
        close = text.find(end, body_start)
        while close != -1 and inside is not None and inside(text[body_start:close]):
            close = text.find(end, close + len(end))
        limits = [close] if close != -1 else []
        for tag in (start, *stops):
            found = text.find(tag, body_start)
            if found != -1:
                limits.append(found)
        body_end = min(limits) if limits else len(text)
        closed = body_end == close
        yield pos, text[body_start:body_end], closed
        pos = text.find(start, body_end + len(end) if closed else body_end)


def ends_inside_json_string(text: str) -> bool:
    """Whether the JSON that starts at the first `{` of `text` is cut inside a string."""
    start = text.find("{")
    if start == -1:
        return False
    inside = escaped = False
    for char in text[start:]:
        if escaped:
            escaped = False
        elif inside and char == "\\":
            escaped = True
        elif char == '"':
            inside = not inside
    return inside


def section_calls(
    text: str,
    opener: re.Pattern[str],
    closer: re.Pattern[str],
    splitter: re.Pattern[str],
    call_of: Callable[[str], ToolCall | None],
) -> list[ToolCall]:
    """The calls in formats that wrap them in begin/end tokens (DeepSeek, Kimi): each stretch
    from an opener to the next closer (or the end of the text) cut by `splitter` into pieces,
    each read by `call_of`."""
    calls: list[ToolCall] = []
    pos = 0
    while (start := opener.search(text, pos)) is not None:
        end = closer.search(text, start.end())
        for piece in splitter.split(text[start.end() : end.start() if end else len(text)]):
            call = call_of(piece)
            if call is not None:
                calls.append(call)
        if end is None:
            break
        pos = end.end()
    return calls
