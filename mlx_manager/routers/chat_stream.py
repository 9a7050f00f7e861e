"""Generating playground replies: send, regenerate, edit and resend, typed tool results, stop.

Each POST answers with the turn as server-sent events when the page's script asks for them
(`Accept: text/event-stream`): reasoning, content, tool_call, tool_result, stats, error and
done, plus the server-rendered HTML of each finished message (the user's with the
conversation's title, which the first message sets). A plain form (no script) gets the
turn run to its end and a redirect back to the conversation.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from sqlmodel import Session
from sse_starlette import EventSourceResponse, ServerSentEvent
from starlette.datastructures import FormData

from mlx_manager.records import ChatMessage, Conversation
from mlx_manager.routers.chat import page
from mlx_manager.services.chat_options import ChatOptions, OptionsError
from mlx_manager.services.chat_runner import RunningError, chat_runs, manual_result, run_turn
from mlx_manager.services.conversations import (
    ConversationError,
    add_message,
    get_conversation,
    last_user_position,
    messages_of,
    pending_tool_calls,
    rewind_to,
    update_settings,
)
from mlx_manager.web.templating import templates
from mlx_server.database import get_engine
from mlx_server.models.store import get_model

router = APIRouter(prefix="/chat")

PING_SECONDS = 15


class FormError(ValueError):
    """The form cannot be used as sent; the message says what to fix."""


@router.post("/{conversation_id}/send", response_class=HTMLResponse)
async def send(request: Request, conversation_id: int) -> Response:
    form = await request.form()
    with Session(get_engine(), expire_on_commit=False) as session:
        conversation = _idle_conversation(request, session, conversation_id)
        if isinstance(conversation, Response):
            return conversation
        try:
            options = options_from_form(form)
            model_id = _text(form, "model_id")
            if get_model(session, model_id) is None:
                raise FormError(f"There is no model {model_id!r}; pick one from the list.")
            content = _text(form, "content").strip()
            if not content:
                raise FormError("Type a message first.")
        except (FormError, OptionsError) as exc:
            return _refused(request, session, conversation_id, str(exc), 400)
        update_settings(
            session,
            conversation,
            model_id=model_id,
            system_prompt=_text(form, "system_prompt"),
            parameters=options.stored(),
        )
        message = add_message(session, conversation, "user", content)
    return await _turn(request, conversation_id, options, [_user_event(request, conversation, message)])


@router.post("/{conversation_id}/regenerate", response_class=HTMLResponse)
async def regenerate(request: Request, conversation_id: int) -> Response:
    """Answer the last user message again (its earlier answers are replaced)."""
    with Session(get_engine(), expire_on_commit=False) as session:
        conversation = _idle_conversation(request, session, conversation_id)
        if isinstance(conversation, Response):
            return conversation
        try:
            position = last_user_position(messages_of(session, conversation_id)) + 1
        except ConversationError as exc:
            return _refused(request, session, conversation_id, str(exc), 400)
        rewind_to(session, conversation, position)
        options = ChatOptions.from_stored(conversation.parameters)
    return await _turn(request, conversation_id, options, [("rewind", {"position": position})])


@router.post("/{conversation_id}/messages/{position}/edit", response_class=HTMLResponse)
async def edit(request: Request, conversation_id: int, position: int) -> Response:
    """Change a user message and resend from there (everything after it is dropped)."""
    form = await request.form()
    content = _text(form, "content").strip()
    with Session(get_engine(), expire_on_commit=False) as session:
        conversation = _idle_conversation(request, session, conversation_id)
        if isinstance(conversation, Response):
            return conversation
        target = next((m for m in messages_of(session, conversation_id) if m.position == position), None)
        if target is None or target.role != "user":
            return _refused(request, session, conversation_id, "Only your own messages can be edited.", 400)
        if not content:
            return _refused(request, session, conversation_id, "An edited message cannot be empty.", 400)
        rewind_to(session, conversation, position)
        message = add_message(session, conversation, "user", content)
        options = ChatOptions.from_stored(conversation.parameters)
    events: list[tuple[str, dict[str, Any]]] = [
        ("rewind", {"position": position}),
        _user_event(request, conversation, message),
    ]
    return await _turn(request, conversation_id, options, events)


@router.post("/{conversation_id}/tool-result", response_class=HTMLResponse)
async def tool_result(request: Request, conversation_id: int) -> Response:
    """A result typed for a pending call (manual mode); the turn goes on once all are answered."""
    form = await request.form()
    try:
        saved = manual_result(conversation_id, _text(form, "tool_call_id"), _text(form, "content"))
    except ValueError as exc:
        with Session(get_engine()) as session:
            return _refused(request, session, conversation_id, str(exc), 400)
    with Session(get_engine(), expire_on_commit=False) as session:
        conversation = get_conversation(session, conversation_id)
        assert conversation is not None
        options = ChatOptions.from_stored(conversation.parameters)
        waiting = _pending(session, conversation_id)
    first: list[tuple[str, dict[str, Any]]] = [("tool_result", {"message": saved, "is_error": False})]
    if waiting:
        return await _turn(request, conversation_id, options, first, generate=False)
    return await _turn(request, conversation_id, options, first)


@router.post("/{conversation_id}/stop", response_class=HTMLResponse)
async def stop(request: Request, conversation_id: int) -> Response:
    """Stop the reply being generated (server-side: generation ends within a token)."""
    stopped = chat_runs.stop(conversation_id)
    if request.headers.get("accept", "").startswith("application/json"):
        return Response(json.dumps({"stopped": stopped}), media_type="application/json")
    return RedirectResponse(f"/chat/{conversation_id}", status_code=303)


# --- Helpers ---


def _idle_conversation(request: Request, session: Session, conversation_id: int) -> Conversation | Response:
    """The conversation, if it exists and no reply is being generated for it; else the refusal."""
    conversation = get_conversation(session, conversation_id)
    if conversation is None:
        return _refused(request, session, conversation_id, "There is no such conversation.", 404)
    if chat_runs.running(conversation_id):
        return _refused(request, session, conversation_id, "Stop the reply being generated first.", 409)
    return conversation


async def _turn(
    request: Request,
    conversation_id: int,
    options: ChatOptions,
    first: list[tuple[str, dict[str, Any]]],
    *,
    generate: bool = True,
) -> Response:
    async def events() -> AsyncIterator[tuple[str, dict[str, Any]]]:
        for event in first:
            yield event
        if not generate:
            return
        try:
            cancel = chat_runs.start(conversation_id)
        except RunningError as exc:
            yield "error", {"message": str(exc)}
            return
        try:
            async for event in run_turn(conversation_id, options, cancel):
                yield event
        finally:
            chat_runs.finish(conversation_id)

    if "text/event-stream" not in request.headers.get("accept", ""):
        # Without a script the browser waits for the whole turn, then reloads the conversation.
        async for _ in events():
            pass
        return RedirectResponse(f"/chat/{conversation_id}", status_code=303)

    async def sse() -> AsyncIterator[ServerSentEvent]:
        async for name, data in events():
            yield _sse(request, name, data, options)
        yield ServerSentEvent(event="done", data="{}")

    return EventSourceResponse(sse(), ping=PING_SECONDS, headers={"Cache-Control": "no-cache"})


def _sse(request: Request, name: str, data: dict[str, Any], options: ChatOptions) -> ServerSentEvent:
    if name == "assistant_start":
        data = {"html": templates.get_template("partials/chat_streaming.html").render(request=request)}
    elif name == "assistant_saved":
        name, data = "message", {"html": _message_html(request, data["message"], options)}
    elif name == "tool_result":
        data = _result_data(request, data["message"], is_error=data.get("is_error", False))
    elif name == "tool_call":
        card = templates.get_template("partials/chat_tool_call.html")
        data = {**data, "html": card.render(request=request, call=data, result=None, pending=False)}
    return ServerSentEvent(event=name, data=json.dumps(data, ensure_ascii=False))


def _user_event(
    request: Request, conversation: Conversation, message: ChatMessage
) -> tuple[str, dict[str, Any]]:
    """The user's message, and the title it may have given the conversation (for the sidebar)."""
    return "user", {"html": _message_html(request, message), "title": conversation.title}


def _message_html(request: Request, message: ChatMessage, options: ChatOptions | None = None) -> str:
    """A finished message; calls the server will not run get a form for their typed result."""
    waiting = [
        c["id"] for c in message.tool_calls or [] if options and not options.runs_here(c["function"]["name"])
    ]
    template = templates.get_template("partials/chat_message.html")
    return template.render(request=request, message=message, results={}, pending_ids=waiting, last=True)


def _result_data(request: Request, message: ChatMessage, *, is_error: bool) -> dict[str, Any]:
    block = templates.get_template("partials/chat_tool_result.html")
    return {"tool_call_id": message.tool_call_id, "is_error": is_error, "html": block.render(result=message)}


def _pending(session: Session, conversation_id: int) -> bool:
    return bool(pending_tool_calls(messages_of(session, conversation_id)))


def _refused(request: Request, session: Session, conversation_id: int, message: str, status: int) -> Response:
    if "text/event-stream" in request.headers.get("accept", ""):
        body = json.dumps({"message": message})
        return Response(
            f"event: error\ndata: {body}\n\nevent: done\ndata: {{}}\n\n",
            status_code=status,
            media_type="text/event-stream",
        )
    response = page(request, session, get_conversation(session, conversation_id), error=message)
    response.status_code = status
    return response


def _text(form: FormData, name: str) -> str:
    value = form.get(name, "")
    return value if isinstance(value, str) else ""


def options_from_form(form: FormData) -> ChatOptions:
    """The parameters panel as ChatOptions; a field that is not a number says so."""

    def number(name: str, kind: type[float] | type[int], default: float) -> Any:
        text = _text(form, name).strip()
        if not text:
            return kind(default)
        try:
            return kind(text)
        except ValueError:
            raise FormError(
                f"{name.replace('_', ' ').capitalize()} must be a number, not {text!r}."
            ) from None

    defaults = ChatOptions()
    thinking = {"on": True, "off": False}.get(_text(form, "thinking"))
    seed_text = _text(form, "seed").strip()
    return ChatOptions.parse(
        temperature=number("temperature", float, defaults.temperature),
        top_p=number("top_p", float, defaults.top_p),
        top_k=number("top_k", int, defaults.top_k),
        max_tokens=number("max_tokens", int, defaults.max_tokens),
        stop=[line for line in _text(form, "stop").replace("\r\n", "\n").split("\n") if line],
        seed=number("seed", int, 0) if seed_text else None,
        enable_thinking=thinking,
        builtin_tools=[v for v in form.getlist("builtin_tools") if isinstance(v, str)],
        tools_json=_text(form, "tools_json"),
        tool_choice=_text(form, "tool_choice") or "auto",
        agent_mode=_text(form, "agent_mode") or "auto",
        max_depth=number("max_depth", int, defaults.max_depth),
    )
