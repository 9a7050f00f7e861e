"""One playground turn, run as a job (services/chat_jobs.py): the model's reply saved as it grows
(at least every second), then the agent loop (seed 000: call → execute → feed the result back →
continue) up to a maximum depth. The conversation's MCP servers are connected for the turn
(services/mcp_tools.py) and their tools offered beside the built-in and user-defined ones.

Calls `generate_chat_completion()` directly (blueprint §9), never HTTP to /v1, and renders its
typed events into the job: text appended to the reply or its reasoning, tool calls as cards.
"""

from __future__ import annotations

import asyncio
import json
import time
from contextlib import aclosing

from sqlmodel import Session

from mlx_manager.config import get_manager_settings
from mlx_manager.records import Conversation, ConversationMessage, McpServer, MessageStatus
from mlx_manager.services.chat_jobs import ChatJob, Reply
from mlx_manager.services.chat_options import ChatOptions
from mlx_manager.services.chat_tools import execute_tool, rejected_call_result
from mlx_manager.services.conversations import (
    add_message,
    messages_of,
    pending_tool_calls,
    pipeline_messages,
    rewind_to,
    save_message,
    stored_calls,
)
from mlx_manager.services.mcp_tools import McpToolbox, mcp_toolbox
from mlx_server.facade import (
    APIError,
    CompletionStats,
    GenerationEvent,
    GenerationRequest,
    ReasoningDelta,
    TextDelta,
    ToolCall,
    ToolCallDone,
    ToolChoice,
    background_session,
    generate_chat_completion,
    is_routed_model,
    load_model,
    pool_state,
)

SAVE_SECONDS = 0.5  # a growing reply is written at least this often (a restart keeps it)


async def run_turn(job: ChatJob, options: ChatOptions) -> None:
    """Generate the assistant's reply to the conversation as it stands, then run its tool calls
    (built-in and MCP ones in auto mode) and continue, until a reply without calls, a call waiting for
    a typed result, a stop, or `options.max_depth` rounds."""
    with background_session(expire_on_commit=False) as session:
        conversation = session.get(Conversation, job.conversation_id)
        if conversation is None or not conversation.model_id:
            job.error = "Pick a model first."
            return
        if not await _loaded(job, conversation.model_id):
            return
        servers = [s for i in options.mcp_servers if (s := session.get(McpServer, i)) is not None]
        taken = {tool.name for tool in options.tools() or ()}
        async with mcp_toolbox(servers, taken, get_manager_settings().mcp_timeout_seconds) as toolbox:
            for problem in toolbox.problems:
                job.say(problem)
            await _agent_loop(session, conversation, options, job, toolbox)
        if toolbox.problems and not job.error:  # said where the thread shows how the turn ended
            job.error = " ".join(toolbox.problems) + " The reply was generated without its tools."


async def _agent_loop(
    session: Session, conversation: Conversation, options: ChatOptions, job: ChatJob, toolbox: McpToolbox
) -> None:
    """Replies and tool rounds until an answer, a call waiting for a typed result, a stop or
    the maximum depth."""
    answered: set[tuple[str, str]] = set()
    answer_now = False
    for depth in range(options.max_depth + 1):
        if depth == options.max_depth and not answer_now:
            # As LangChain's early_stopping_method="generate": one last reply without tools,
            # so the user gets an answer from what the calls returned, not just a stop.
            job.say(f"{depth} tool rounds (the maximum depth): the model answers now.")
            answer_now = True
        # "required" holds for the first reply only: after a tool result the model must be
        # free to answer, or a small model calls the same tool until max_depth.
        round_options = options if depth == 0 else options.after_tool_round()
        if answer_now:
            round_options = round_options.answer_only()
        saved = await _one_reply(session, conversation, round_options, job, toolbox)
        if saved is None or job.stop.is_set() or not saved.tool_calls or depth == options.max_depth:
            return
        calls = {_call_key(call) for call in stored_calls(saved)}
        if calls <= answered and not answer_now:
            # It asks again for results it already has (small models loop): that reply is
            # dropped and the model answers with what it has.
            rewind_to(session, conversation, saved.position)
            job.drop_from(saved.position)
            job.say("The model repeated a call it has the result of; it answers now.")
            answer_now = True
            continue
        answered |= calls
        await _run_tools(session, conversation, saved, options, job, toolbox)
        if pending_tool_calls(messages_of(session, job.conversation_id)):
            return


async def _loaded(job: ChatJob, model_id: str) -> bool:
    if pool_state(model_id).loaded or is_routed_model(model_id):  # a remote backend may serve it
        return True
    job.say(f"Loading {model_id}…")
    started = time.perf_counter()
    try:
        await load_model(model_id, pin=False)
    except APIError as exc:
        job.error = exc.message
        return False
    job.say(f"Loaded {model_id} in {time.perf_counter() - started:.1f} s")
    return True


def _call_key(call: ToolCall) -> tuple[str, str]:
    function = call.function
    try:
        arguments = json.dumps(json.loads(function.arguments or "{}"), sort_keys=True)
    except ValueError:
        arguments = function.arguments
    return function.name, arguments


async def _one_reply(
    session: Session, conversation: Conversation, options: ChatOptions, job: ChatJob, toolbox: McpToolbox
) -> ConversationMessage | None:
    """One reply of the model, stored from its first event on and updated as it grows."""
    assert conversation.id is not None and conversation.model_id is not None
    tools = (*(options.tools() or ()), *toolbox.definitions()) or None
    stats = CompletionStats()
    started = time.perf_counter()
    request = GenerationRequest(
        model=conversation.model_id,
        params=options.generation_params(),
        messages=pipeline_messages(conversation, messages_of(session, conversation.id)),
        tools=tools,
        tool_choice=ToolChoice(options.tool_choice) if tools else ToolChoice(),
        enable_thinking=options.enable_thinking,
        rejected_calls_as_content=False,  # each gets a "rejected call" card and its reason as result
    )
    try:
        stream = await generate_chat_completion(request, stats)
    except APIError as exc:
        job.error = exc.message
        return None
    running = add_message(session, conversation, "assistant", status=MessageStatus.RUNNING)
    reply = job.reply = Reply(running, saved_at=time.perf_counter())
    job.add(running)
    status = MessageStatus.DONE
    try:
        async with aclosing(stream.__aiter__()) as events:
            async for event in events:
                if job.stop.is_set():
                    status = MessageStatus.STOPPED
                    break
                _apply(event, reply, job)
                if time.perf_counter() - reply.saved_at >= SAVE_SECONDS:
                    _store(session, reply)
    except asyncio.CancelledError:  # the app stops: keep what was generated, say it was cut
        _finish(session, reply, stats, started, MessageStatus.INTERRUPTED)
        raise
    except Exception as exc:  # after the first event: keep what was generated, say what broke
        job.error = f"Generation failed: {exc}"
    _finish(session, reply, stats, started, status)
    job.reply = None
    job.reshaped()
    _reject_calls(session, conversation, reply, job)
    return running


def _apply(event: GenerationEvent, reply: Reply, job: ChatJob) -> None:
    """One pipeline event folded into the reply (events.Reply), and what the page is told: text to
    append, or a new shape (the reasoning block opens or closes, a tool card)."""
    reply.folded.add(event)
    match event:
        case ReasoningDelta(text=text) if text:
            if reply.reasoning_started is None:
                reply.reasoning_started = time.perf_counter()
                job.reshaped()
            else:
                job.appended("reasoning", text)
        case TextDelta(text=text) if text:
            if reply.folded.reasoning and reply.reasoning_ended is None:
                reply.reasoning_ended = time.perf_counter()  # the reasoning block closes
                job.reshaped()
            else:
                job.appended("content", text)
        case ToolCallDone():
            job.reshaped()


def _store(session: Session, reply: Reply) -> None:
    reply.message.content = reply.text
    reply.message.reasoning = reply.reasoning_text or None
    reply.saved_at = time.perf_counter()
    save_message(session, reply.message)


def _rounded(value: float | None, digits: int) -> float | None:
    return round(value, digits) if value is not None else None


def _finish(
    session: Session, reply: Reply, stats: CompletionStats, started: float, status: MessageStatus
) -> None:
    calls = reply.stored_calls()
    message = reply.message
    message.reasoning = reply.folded.reasoning_content or None
    # The pipeline's trimming (events.Reply.content); a rejected call's card also sits beside it.
    content = reply.folded.content or ""
    message.content = content.strip() if reply.folded.rejected_calls else content
    ended = reply.reasoning_ended or (time.perf_counter() if message.reasoning else None)
    message.tool_calls = calls or None
    message.status = status
    message.stats = {
        "ttft_s": round(stats.ttft_s, 3) if stats.ttft_s is not None else None,
        "tokens_per_s": round(stats.decode_tokens_per_s, 2) if stats.decode_tokens_per_s else None,
        # Speculative decoding: the draft model's share of the generated tokens (None: no draft).
        "draft_acceptance_rate": _rounded(stats.draft_acceptance_rate, 3),
        "prompt_tokens": stats.prompt_tokens,
        "completion_tokens": stats.completion_tokens,
        "total_s": round(time.perf_counter() - started, 2),
        "reasoning_s": round(ended - reply.reasoning_started, 1)
        if ended and reply.reasoning_started
        else None,
        "finish_reason": status.value
        if status != MessageStatus.DONE
        else ("tool_calls" if calls else reply.folded.finish.reason if reply.folded.finish else None),
    }
    save_message(session, message)


def _reject_calls(session: Session, conversation: Conversation, reply: Reply, job: ChatJob) -> None:
    """A call the checker refused gets its reason as the result, so the model can retry."""
    for rejected in reply.folded.rejected_calls:
        function = rejected.call.function
        content = rejected_call_result(function.name, function.arguments, rejected.reason)
        job.add(add_message(session, conversation, "tool", content, tool_call_id=rejected.call.id))


async def _run_tools(
    session: Session,
    conversation: Conversation,
    message: ConversationMessage,
    options: ChatOptions,
    job: ChatJob,
    toolbox: McpToolbox,
) -> None:
    """Built-in and MCP tools run here in auto mode; every other call waits for a typed result."""
    answered = {m.tool_call_id for m in messages_of(session, conversation.id or 0) if m.role == "tool"}
    for call in stored_calls(message):
        name, arguments = call.function.name, call.function.arguments
        if call.id in answered:
            continue
        if options.agent_mode == "auto" and toolbox.has(name):
            job.say(f"Calling {name} on its MCP server…")
            result = await toolbox.call(name, arguments)
        elif options.runs_here(name):
            result = execute_tool(name, arguments)
        else:
            continue
        job.add(add_message(session, conversation, "tool", result.content, tool_call_id=call.id))


def manual_result(conversation_id: int, tool_call_id: str, content: str) -> ConversationMessage:
    """Store the result a user typed for a pending call (manual mode)."""
    with background_session(expire_on_commit=False) as session:
        conversation = session.get(Conversation, conversation_id)
        if conversation is None:
            raise ValueError("There is no such conversation.")
        pending = {call.id for call in pending_tool_calls(messages_of(session, conversation_id))}
        if tool_call_id not in pending:
            raise ValueError(f"No call {tool_call_id!r} is waiting for a result.")
        return add_message(session, conversation, "tool", content, tool_call_id=tool_call_id)
