"""The chat pages as HTML, for both chat routers: the page or, for htmx, its thread; and the
pieces the live view sends (the running turn, the thread as the turn ended). What they show is
gathered by services/chat_view.py; this module only renders it."""

from __future__ import annotations

from fastapi import Request
from fastapi.responses import HTMLResponse
from sqlmodel import Session

from mlx_manager.records import Conversation
from mlx_manager.services.chat_jobs import ChatJob
from mlx_manager.services.chat_view import page_context, thread_context, turn_context
from mlx_manager.services.conversations import get_conversation
from mlx_manager.web.templating import render, templates, wants_fragment
from mlx_server.facade import background_session


def chat_response(
    request: Request,
    session: Session,
    conversation: Conversation | None,
    *,
    error: str | None = None,
    status: int = 200,
    draft: str = "",
) -> HTMLResponse:
    """The chat page, or for htmx only its thread (with the Send button's state swapped out of
    band); `error` says what to fix, `draft` keeps the message that was refused."""
    context = page_context(session, conversation)
    response = render(
        request,
        "chat.html",
        "partials/chat_thread.html",
        **context,
        error=error,
        draft=draft,
        oob=wants_fragment(request),
    )
    response.status_code = status
    return response


def turn_html(request: Request, job: ChatJob) -> str:
    """The running turn so far (a "turn" event)."""
    return templates.get_template("partials/chat_turn.html").render(request=request, **turn_context(job))


def thread_html(request: Request, conversation_id: int) -> str:
    """The conversation's thread as the turn ended (the "done" event), the Send button out of band."""
    with background_session(expire_on_commit=False) as session:
        conversation = get_conversation(session, conversation_id)
        if conversation is None:
            return ""
        context = thread_context(session, conversation)
    return templates.get_template("partials/chat_thread.html").render(request=request, **context, oob=True)
