"""One playground turn: the model's reply streamed as UI events, saved as it ends, and the agent
loop (seed 000: call → execute → feed the result back → continue) up to a maximum depth.

Calls `generate_chat_completion()` directly (blueprint §9), never HTTP to /v1. Events are
(name, data) pairs; the router renders them as server-sent events.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from contextlib import aclosing
from dataclasses import dataclass, field
from typing import Any

from sqlmodel import Session

from mlx_manager.records import ChatMessage, Conversation
from mlx_manager.services.chat_options import ChatOptions
from mlx_manager.services.chat_tools import execute_tool, rejected_call_result
from mlx_manager.services.conversations import (
    add_message,
    messages_of,
    pending_tool_calls,
    pipeline_messages,
    rewind_to,
)
from mlx_server.database import get_engine
from mlx_server.errors import APIError
from mlx_server.models.pool import get_model_pool
from mlx_server.services.pipeline.events import (
    Finish,
    GenerationEvent,
    ReasoningDelta,
    TextDelta,
    ToolCallDone,
    ToolCallRejected,
)
from mlx_server.services.pipeline.generation import CompletionStats
from mlx_server.services.pipeline.inference import generate_chat_completion
from mlx_server.services.pipeline.request import GenerationRequest

Event = tuple[str, dict[str, Any]]


class RunningError(ValueError):
    """A second reply was asked for while one is being generated."""


@dataclass
class _Reply:
    content: list[str] = field(default_factory=list)
    reasoning: list[str] = field(default_factory=list)
    calls: list[dict[str, Any]] = field(default_factory=list)
    rejected: list[tuple[dict[str, Any], str]] = field(default_factory=list)
    finish_reason: str | None = None
    reasoning_started: float | None = None
    reasoning_ended: float | None = None


class ChatRuns:
    """The turns being generated, by conversation: one at a time each, stoppable by id."""

    def __init__(self) -> None:
        self._cancel: dict[int, asyncio.Event] = {}

    def start(self, conversation_id: int) -> asyncio.Event:
        if conversation_id in self._cancel:
            raise RunningError("A reply is being generated; stop it or wait for it to finish.")
        event = self._cancel[conversation_id] = asyncio.Event()
        return event

    def finish(self, conversation_id: int) -> None:
        self._cancel.pop(conversation_id, None)

    def stop(self, conversation_id: int) -> bool:
        event = self._cancel.get(conversation_id)
        if event is not None:
            event.set()
        return event is not None

    def running(self, conversation_id: int) -> bool:
        return conversation_id in self._cancel


chat_runs = ChatRuns()


async def run_turn(conversation_id: int, options: ChatOptions, cancel: asyncio.Event) -> AsyncIterator[Event]:
    """Generate the assistant's reply to the conversation as it stands, then run its tool calls
    (built-in ones in auto mode) and continue, until a reply without calls, a call waiting for
    a typed result, a stop, or `options.max_depth` rounds."""
    with Session(get_engine(), expire_on_commit=False) as session:
        conversation = session.get(Conversation, conversation_id)
        if conversation is None or not conversation.model_id:
            yield "error", {"message": "Pick a model first."}
            return
        model_id = conversation.model_id
        if get_model_pool().get_loaded(model_id) is None:
            yield "status", {"text": f"Loading {model_id}…"}
            started = time.perf_counter()
            try:
                await get_model_pool().preload(model_id, pin=False)
            except APIError as exc:
                yield "error", {"message": exc.message}
                return
            yield "status", {"text": f"Loaded {model_id} in {time.perf_counter() - started:.1f} s"}
        answered: set[tuple[str, str]] = set()
        answer_now = False
        for depth in range(options.max_depth + 1):
            if depth == options.max_depth and not answer_now:
                # As LangChain's early_stopping_method="generate": one last reply without tools,
                # so the user gets an answer from what the calls returned, not just a stop.
                yield "status", {"text": f"{depth} tool rounds (the maximum depth): the model answers now."}
                answer_now = True
            saved: ChatMessage | None = None
            # "required" holds for the first reply only: after a tool result the model must be
            # free to answer, or a small model calls the same tool until max_depth.
            round_options = options if depth == 0 else options.after_tool_round()
            if answer_now:
                round_options = round_options.answer_only()
            async for event in _one_reply(session, conversation, round_options, cancel):
                if event[0] == "assistant_saved":
                    saved = event[1]["message"]
                yield event
            if saved is None or cancel.is_set() or not saved.tool_calls or depth == options.max_depth:
                return
            calls = {_call_key(call) for call in saved.tool_calls}
            if calls <= answered and not answer_now:
                # It asks again for results it already has (small models loop): that reply is
                # dropped and the model answers with what it has.
                rewind_to(session, conversation, saved.position)
                yield "rewind", {"position": saved.position}
                yield "status", {"text": "The model repeated a call it has the result of; it answers now."}
                answer_now = True
                continue
            answered |= calls
            for event in _run_tools(session, conversation, saved, options):
                yield event
            if pending_tool_calls(messages_of(session, conversation_id)):
                yield "status", {"text": "Waiting for the tool results you type."}
                return


def _call_key(call: dict[str, Any]) -> tuple[str, str]:
    function = call["function"]
    try:
        arguments = json.dumps(json.loads(function["arguments"] or "{}"), sort_keys=True)
    except ValueError:
        arguments = function["arguments"]
    return function["name"], arguments


async def _one_reply(
    session: Session, conversation: Conversation, options: ChatOptions, cancel: asyncio.Event
) -> AsyncIterator[Event]:
    assert conversation.id is not None and conversation.model_id is not None
    messages = pipeline_messages(conversation, messages_of(session, conversation.id))
    tools = options.tools()
    stats = CompletionStats()
    started = time.perf_counter()
    request = GenerationRequest(
        model=conversation.model_id,
        params=options.generation_params(),
        messages=messages,
        tools=tools,
        tool_choice=options.tool_choice if tools else None,
        enable_thinking=options.enable_thinking,
    )
    try:
        stream = await generate_chat_completion(request, stats)
    except APIError as exc:
        yield "error", {"message": exc.message}
        return
    yield "assistant_start", {}
    reply = _Reply()
    try:
        async with aclosing(stream.__aiter__()) as events:
            async for event in events:
                if cancel.is_set():
                    break
                for ui_event in _ui_events(event, reply):
                    yield ui_event
    except Exception as exc:  # after the first event: keep what was generated, say what broke
        yield "error", {"message": f"Generation failed: {exc}"}
    message = _save_reply(session, conversation, reply, stats, started, cancelled=cancel.is_set())
    yield "stats", dict(message.stats or {})
    yield "assistant_saved", {"message": message}
    for call, reason in reply.rejected:
        result = add_message(
            session,
            conversation,
            "tool",
            rejected_call_result(call["function"]["name"], call["function"]["arguments"], reason),
            tool_call_id=call["id"],
        )
        yield "tool_result", {"message": result, "is_error": True}


def _ui_events(event: GenerationEvent, reply: _Reply) -> list[Event]:
    """The playground's rendering of one pipeline event (and what the saved reply keeps)."""
    match event:
        case ReasoningDelta(text=text) if text:
            reply.reasoning_started = reply.reasoning_started or time.perf_counter()
            reply.reasoning.append(text)
            return [("reasoning", {"text": text})]
        case TextDelta(text=text) if text:
            if reply.reasoning and reply.reasoning_ended is None:
                reply.reasoning_ended = time.perf_counter()
            reply.content.append(text)
            return [("content", {"text": text})]
        case ToolCallDone(call=call):
            reply.calls.append(call.model_dump())
            return [("tool_call", call.model_dump())]
        case ToolCallRejected(call=call, reason=reason):
            reply.rejected.append((call.model_dump(), reason))
        case Finish(reason=reason):
            reply.finish_reason = reason
    return []


def _save_reply(
    session: Session,
    conversation: Conversation,
    reply: _Reply,
    stats: CompletionStats,
    started: float,
    *,
    cancelled: bool,
) -> ChatMessage:
    calls = reply.calls + [call for call, _ in reply.rejected]
    reasoning = "".join(reply.reasoning).strip() or None
    content = "".join(reply.content)
    if calls or reasoning:
        content = content.strip()
    ended = reply.reasoning_ended or (time.perf_counter() if reasoning else None)
    figures: dict[str, Any] = {
        "ttft_s": round(stats.ttft_s, 3) if stats.ttft_s is not None else None,
        "tokens_per_s": round(stats.decode_tokens_per_s, 2) if stats.decode_tokens_per_s else None,
        "prompt_tokens": stats.prompt_tokens,
        "completion_tokens": stats.completion_tokens,
        "total_s": round(time.perf_counter() - started, 2),
        "reasoning_s": round(ended - reply.reasoning_started, 1)
        if ended and reply.reasoning_started
        else None,
        "finish_reason": "stopped" if cancelled else ("tool_calls" if calls else reply.finish_reason),
    }
    return add_message(
        session,
        conversation,
        "assistant",
        content,
        reasoning=reasoning,
        tool_calls=calls or None,
        stats=figures,
    )


def _run_tools(
    session: Session, conversation: Conversation, message: ChatMessage, options: ChatOptions
) -> list[Event]:
    """Built-in tools run here in auto mode; every other call waits for a typed result."""
    events: list[Event] = []
    answered = {m.tool_call_id for m in messages_of(session, conversation.id or 0) if m.role == "tool"}
    for call in message.tool_calls or []:
        name = call["function"]["name"]
        if call["id"] in answered or not options.runs_here(name):
            continue
        result = execute_tool(name, call["function"]["arguments"])
        saved = add_message(session, conversation, "tool", result.content, tool_call_id=call["id"])
        events.append(("tool_result", {"message": saved, "is_error": result.is_error}))
    return events


def manual_result(conversation_id: int, tool_call_id: str, content: str) -> ChatMessage:
    """Store the result a user typed for a pending call (manual mode)."""
    with Session(get_engine(), expire_on_commit=False) as session:
        conversation = session.get(Conversation, conversation_id)
        if conversation is None:
            raise ValueError("There is no such conversation.")
        pending = {c["id"] for c in pending_tool_calls(messages_of(session, conversation_id))}
        if tool_call_id not in pending:
            raise ValueError(f"No call {tool_call_id!r} is waiting for a result.")
        return add_message(session, conversation, "tool", content, tool_call_id=tool_call_id)
