"""gpt-oss tool calls in OpenAI's harmony format, and the user-visible text of a harmony output.

A call is a message addressed to a function: the recipient sits in the channel part of the header
(`<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{...}<|call|>`) or in
the role part (`<|start|>assistant to=functions.get_weather<|channel|>commentary json<|message|>`).
The template opens `<|start|>assistant`, so the first message of an output has no `<|start|>`;
`<|call|>` is a stop token, so it is usually missing from the decoded text.

Content is the `final` channel plus commentary preambles (messages without a recipient); the
analysis channel is reasoning (see `HarmonyThinkingParser`). Header text (`<|channel|>final`...)
is not content: `content_of` / `strip_harmony_control` take it out.
"""

from __future__ import annotations

from typing import Any

from mlx_server.parsers.base import ToolCallParser, make_tool_call
from mlx_server.parsers.call_objects import clean_name
from mlx_server.parsers.grammar.blocks import arguments_rules, literal, per_tool
from mlx_server.parsers.harmony_messages import HarmonyMessage, split_harmony, strip_harmony_control
from mlx_server.parsers.lenient_json import arguments_object, call_arguments, dump_json
from mlx_server.schemas.openai import ToolCall

__all__ = ["HARMONY_HEADERS", "HarmonyParser", "content_of", "strip_harmony_control"]

# Message headers and ends that are not content. Longer markers that start the same way (a
# call's `<|start|>assistant<|channel|>commentary to=`, the analysis channel) win over these.
HARMONY_HEADERS = [
    "<|start|>assistant",
    "<|channel|>final<|message|>",
    "<|channel|>commentary<|message|>",
    "<|end|>",
    "<|return|>",
    "<|call|>",
]

_NAMESPACE = "functions."
_CALL_END = "<|call|>"


def _call_of(message: HarmonyMessage) -> ToolCall | None:
    if message.recipient is None:
        return None
    recipient = message.recipient
    name = clean_name(recipient.removeprefix(_NAMESPACE))
    if name is None:
        return None
    arguments = arguments_object(message.body)
    if arguments is None:
        return None
    return make_tool_call(name, arguments)


def content_of(text: str) -> str:
    """The user-visible text of a harmony output: final and preamble bodies, in place, no headers.

    Analysis messages (reasoning) and messages that are tool calls are left out; a message
    addressed to a tool whose body is not a call stays (as the StreamingProcessor gives a failed
    call segment back as content). Text without harmony tokens comes back unchanged.
    """
    pieces: list[str] = []
    for message in split_harmony(text):
        loose = message.header is None
        if loose or (not message.is_analysis and _call_of(message) is None):
            # Piece by piece: a stray header must not run into the next message's body.
            pieces.append(strip_harmony_control(message.body))
    return "".join(pieces)


class HarmonyParser(ToolCallParser):
    """gpt-oss (harmony) function calls: one message per call, the recipient names the function."""

    parser_id = "harmony"

    @property
    def drop_markers(self) -> list[str]:
        return HARMONY_HEADERS

    def text_of_non_call(self, segment: str) -> str | None:
        # The markers end inside the header (at "to="): only harmony knows where the body starts.
        return content_of(segment)

    @property
    def stream_markers(self) -> list[tuple[str, str]]:
        # Overlapping starts: the earliest (then longest) match takes its `<|start|>assistant`
        # along. Calls put on the analysis channel (gpt-oss does it) are calls too; the last pair
        # catches a first message whose recipient comes before its channel. A call ends at
        # `<|call|>`, or at the end of output when the stop token is not decoded.
        return [
            ("<|start|>assistant<|channel|>commentary to=", _CALL_END),
            ("<|start|>assistant<|channel|>analysis to=", _CALL_END),
            ("<|start|>assistant to=", _CALL_END),
            ("<|channel|>commentary to=", _CALL_END),
            ("<|channel|>analysis to=", _CALL_END),
            ("to=functions.", _CALL_END),
        ]

    def extract_calls(self, text: str) -> list[ToolCall]:
        calls = (_call_of(message) for message in split_harmony(text) if message.header is not None)
        return [call for call in calls if call is not None]

    def render_calls(self, calls: list[ToolCall]) -> str:
        return "".join(
            f"<|start|>assistant<|channel|>commentary to={_NAMESPACE}{call.function.name} "
            f"<|constrain|>json<|message|>{dump_json(call_arguments(call))}{_CALL_END}"
            for call in calls
        )

    def call_grammar(self, tools: list[dict[str, Any]], *, parallel: bool) -> str | None:
        """One call message on the commentary channel, as gpt-oss writes it after the template's
        `<|start|>assistant`: `<|channel|>commentary to=functions.NAME <|constrain|>json<|message|>`
        and the JSON arguments.

        Always exactly one call, whatever `parallel` says: `<|call|>` is a stop token, so the
        turn ends after the first call message (gpt-oss makes its next call in its next turn).
        The grammar ends with the arguments, where the model writes `<|call|>`; that marker and a
        leading `<|start|>assistant` (both in `render_calls`) are allowed as text too. Every
        special token is a literal of its own (see `DeepSeekParser.call_grammar`).
        """
        if not tools:
            return None
        header = f"{literal('<|constrain|>')} {literal('json')} {literal('<|message|>')}"
        return "\n".join(
            [
                f"start: ({literal('<|start|>')} {literal('assistant')})? {literal('<|channel|>')} "
                f"{literal('commentary to=' + _NAMESPACE)} named ({literal(_CALL_END)})?",
                *per_tool("named", tools, lambda name, args: f"{name} {literal(' ')} {header} {args}"),
                *arguments_rules(tools),
            ]
        )
