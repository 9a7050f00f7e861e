"""Harmony (gpt-oss) messages: an output cut into its messages and the loose text between them.

Shared by the harmony tool parser and the `harmony_analysis` thinking parser, which read the
same message structure.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

HARMONY_HEADER_RE = re.compile(
    r"(?:<\|start\|>(?P<role>[^<]*))?(?:<\|channel\|>(?P<channel>[^<]*))?"
    r"(?:<\|constrain\|>(?P<constrain>[^<]*))?<\|message\|>"
)
# A message body ends at a terminator, or (sloppy output) where the next header starts.
_BODY_END_RE = re.compile(r"<\|(?:end|return|call)\|>|<\|start\|>|<\|channel\|>")
# Every harmony control sequence that must never reach content: header tokens with the header
# text after them (role, channel, recipient, constraint never contain "<"), and terminators.
HARMONY_CONTROL_RE = re.compile(r"<\|(?:start|channel|constrain)\|>[^<]*|<\|(?:message|end|return|call)\|>")
# A recipient written before the channel of the first message, whose `<|start|>` the template wrote.
_LEAD_ROLE_RE = re.compile(r"\s*(?:assistant\s*)?to=[^\s<]+\s*")
_RECIPIENT_RE = re.compile(r"(?:^|\s)to=(\S+)")
# Recipients that are roles, not tools (tool results are addressed `to=assistant`).
_ROLE_NAMES = frozenset({"assistant", "user", "system", "developer", "tool"})


@dataclass(frozen=True)
class HarmonyMessage:
    """One message of a harmony output, or (header None) text outside any message."""

    start: int
    end: int
    body: str
    header: str | None = None
    channel: str | None = None
    recipient: str | None = None
    terminated: bool = True

    @property
    def is_analysis(self) -> bool:
        """Chain of thought: the analysis channel, unless the message is a call."""
        return self.channel == "analysis" and self.recipient is None


def _message(text: str, header: re.Match[str], start: int, end: int, terminated: bool) -> HarmonyMessage:
    # The role part: after `<|start|>`, or (first message, opened by the template) the text
    # before the channel, e.g. ` to=functions.get_weather<|channel|>commentary json<|message|>`.
    role = header.group("role") or text[start : header.start()]
    channel_text = header.group("channel") or ""
    found = _RECIPIENT_RE.search(role) or _RECIPIENT_RE.search(channel_text)
    recipient = found.group(1) if found else None
    if recipient is not None and recipient in _ROLE_NAMES:
        recipient = None
    words = channel_text.split()
    channel = words[0] if words and not words[0].startswith("to=") else None
    body_end = end if not terminated else text.rfind("<|", header.end(), end)
    return HarmonyMessage(
        start=start,
        end=end,
        body=text[header.end() : body_end],
        header=text[start : header.end()],
        channel=channel,
        recipient=recipient,
        terminated=terminated,
    )


def split_harmony(text: str) -> list[HarmonyMessage]:
    """`text` cut into harmony messages and the loose text between them, in order, covering it all."""
    parts: list[HarmonyMessage] = []
    pos = 0
    while pos < len(text):
        header = HARMONY_HEADER_RE.search(text, pos)
        if header is None:
            parts.append(HarmonyMessage(start=pos, end=len(text), body=text[pos:]))
            break
        start = header.start()
        if header.group("role") is None and _LEAD_ROLE_RE.fullmatch(text, pos, start):
            start = pos
        elif start > pos:
            parts.append(HarmonyMessage(start=pos, end=start, body=text[pos:start]))
        stop = _BODY_END_RE.search(text, header.end())
        if stop is None:
            parts.append(_message(text, header, start, len(text), terminated=False))
            break
        terminated = stop.group(0) not in ("<|start|>", "<|channel|>")
        end = stop.end() if terminated else stop.start()
        parts.append(_message(text, header, start, end, terminated))
        pos = end
    return parts


def strip_harmony_control(text: str) -> str:
    """`text` without harmony headers and terminators; message bodies are kept in place."""
    return HARMONY_CONTROL_RE.sub("", text)
