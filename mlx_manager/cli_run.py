"""`mlx-manager run ID [PROMPT]`: chat with a model of the running server in the terminal.

With a prompt (or text piped on stdin) it answers once. Without, it is a conversation: each reply
streams as it is written, reasoning dimmed, tool calls as lines of their own; `/bye` or Ctrl-D
ends it, Ctrl-C stops a reply. With `--tools FILE` (OpenAI tool definitions) the model may call
them: the CLI runs no tool, it asks for each call's result and the model continues from it.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

import typer

from mlx_manager.cli_client import KeyOption, ServerClient
from mlx_manager.cli_support import CliError, console, unknown_model

PROMPT = ">>> "
HELP = "/bye or Ctrl-D ends the chat, /clear forgets it, Ctrl-C stops a reply."


@dataclass
class StreamedReply:
    """One assistant reply as it arrived: text, reasoning, tool calls (by index)."""

    content: str = ""
    reasoning: str = ""
    calls: dict[int, dict[str, Any]] = field(default_factory=dict)
    stopped: bool = False

    def add_call_delta(self, delta: dict[str, Any]) -> None:
        call = self.calls.setdefault(delta.get("index", 0), {"id": "", "name": "", "arguments": ""})
        function = delta.get("function") or {}
        call["id"] = delta.get("id") or call["id"]
        call["name"] += function.get("name") or ""
        call["arguments"] += function.get("arguments") or ""

    def message(self) -> dict[str, Any]:
        """The reply as the conversation's next assistant message."""
        message: dict[str, Any] = {"role": "assistant", "content": self.content}
        if self.calls:
            message["tool_calls"] = [
                {
                    "id": c["id"],
                    "type": "function",
                    "function": {"name": c["name"], "arguments": c["arguments"]},
                }
                for c in self.calls.values()
            ]
        return message


class ReplyPrinter:
    """Writes a reply as its deltas arrive: reasoning dimmed, then the text, then a line per call."""

    def __init__(self) -> None:
        self.last: Literal["", "reasoning", "content"] = ""

    def write(self, text: str, kind: Literal["reasoning", "content"]) -> None:
        if self.last == "reasoning" and kind == "content":
            console.print("\n")  # the answer starts on a line of its own, after a blank one
        console.print(text, style="dim" if kind == "reasoning" else None, end="", soft_wrap=True)
        self.last = kind

    def calls(self, reply: StreamedReply) -> None:
        if self.last:
            console.print()
        for call in reply.calls.values():
            console.print(f"→ {call['name']}({call['arguments']})", style="cyan", soft_wrap=True)
        self.last = ""

    def end(self) -> None:
        if self.last:
            console.print()
        self.last = ""


@dataclass
class TerminalChat:
    """A conversation with one model of the server; `ask` streams a reply and keeps both turns."""

    client: ServerClient
    model_id: str
    options: dict[str, Any]  # sampling and tools, sent with every request
    system: str | None = None
    messages: list[dict[str, Any]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.clear()

    def clear(self) -> None:
        self.messages = [{"role": "system", "content": self.system}] if self.system else []

    def ask(self, text: str, *, ask_results: bool) -> StreamedReply:
        """Send `text`, stream the reply; with `ask_results`, answer its tool calls and go on."""
        self.messages.append({"role": "user", "content": text})
        while True:
            try:
                reply = self._stream()
            except CliError:
                self.messages.pop()  # the turn did not happen: the next one starts from before it
                raise
            self.messages.append(reply.message())
            if not (reply.calls and ask_results) or reply.stopped:
                return reply
            for call in reply.calls.values():
                result = input(f"result of {call['name']}> ")
                self.messages.append({"role": "tool", "tool_call_id": call["id"], "content": result})

    def _stream(self) -> StreamedReply:
        reply, printer = StreamedReply(), ReplyPrinter()
        body = {"model": self.model_id, "messages": self.messages, "stream": True, **self.options}
        try:
            with self.client.events("POST", "/v1/chat/completions", json=body, about=self.model_id) as events:
                for chunk in events:
                    _apply(chunk, reply, printer)
        except KeyboardInterrupt:  # closing the stream stops the generation on the server
            reply.stopped = True
            console.print(" [stopped]", style="yellow")
        if reply.calls:
            printer.calls(reply)
        printer.end()
        return reply


def _apply(chunk: dict[str, Any], reply: StreamedReply, printer: ReplyPrinter) -> None:
    if isinstance(error := chunk.get("error"), dict):  # the stream's last event: what went wrong
        raise CliError(str(error.get("message", error)))
    for choice in chunk.get("choices", []):
        delta = choice.get("delta") or {}
        if reasoning := delta.get("reasoning_content"):
            reply.reasoning += reasoning
            printer.write(reasoning, "reasoning")
        if content := delta.get("content"):
            reply.content += content
            printer.write(content, "content")
        for call in delta.get("tool_calls") or []:
            reply.add_call_delta(call)


def _options(
    max_tokens: int | None, temperature: float | None, tools: Path | None, tool_choice: str
) -> dict[str, Any]:
    options: dict[str, Any] = {}
    if max_tokens is not None:
        options["max_tokens"] = max_tokens
    if temperature is not None:
        options["temperature"] = temperature
    if tools is not None:
        try:
            options["tools"] = json.loads(tools.read_text())
        except (OSError, ValueError) as exc:
            raise CliError(f"cannot read the tools in {tools}: {exc}") from exc
        options["tool_choice"] = tool_choice
    return options


def converse(chat: TerminalChat) -> None:
    """The interactive loop: a prompt, a streamed reply, until /bye or Ctrl-D."""
    import readline  # noqa: F401  (line editing and history for input())

    console.print(f"chatting with {chat.model_id}; {HELP}", style="dim")
    while True:
        try:
            text = input(PROMPT)
        except EOFError:
            console.print()
            return
        except KeyboardInterrupt:
            console.print(f"\n{HELP}", style="dim")
            continue
        command = text.strip()
        if command in ("/bye", "/exit", "/quit"):
            return
        if command == "/clear":
            chat.clear()
            console.print("the conversation is forgotten", style="dim")
        elif command in ("/?", "/help"):
            console.print(HELP, style="dim")
        elif command:
            try:
                chat.ask(text, ask_results=True)
            except CliError as exc:  # the conversation goes on: the next message may succeed
                console.print(f"error: {exc}", style="red")
            except KeyboardInterrupt:  # while a tool result was asked for
                console.print()
            except EOFError:
                console.print()
                return


def run(
    model_id: Annotated[str, typer.Argument(help="A model id (`mlx-manager ls`).")],
    prompt: Annotated[str | None, typer.Argument(help="Answer this once and exit.")] = None,
    system: Annotated[str | None, typer.Option(help="A system prompt.")] = None,
    max_tokens: Annotated[int | None, typer.Option(help="Longest reply, in tokens.")] = None,
    temperature: Annotated[float | None, typer.Option(help="Sampling temperature.")] = None,
    tools: Annotated[Path | None, typer.Option(help="A JSON file of OpenAI tool definitions.")] = None,
    tool_choice: Annotated[str, typer.Option(help="auto, required or none (with --tools).")] = "auto",
    key: KeyOption = None,
) -> None:
    """Chat with a model in the terminal, or answer one prompt (the running server's)."""
    options = _options(max_tokens, temperature, tools, tool_choice)
    if prompt is None and not sys.stdin.isatty():
        prompt = sys.stdin.read()
    with ServerClient.connect(key) as client:
        if client.find(f"/v1/models/{model_id}") is None:
            raise unknown_model(model_id, client.model_ids())
        chat = TerminalChat(client, model_id, options, system)
        if prompt:
            chat.ask(prompt, ask_results=False)
        else:
            converse(chat)
