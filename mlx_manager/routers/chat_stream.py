"""Playground turns: send (the first message of a new chat creates it), regenerate, edit and
resend, typed tool results, stop, and the live view of a turn.

A POST stores what the user sent, starts the turn as a job (services/chat_jobs.py) and answers
at once: htmx gets the conversation's thread, which follows the turn over server-sent events
from GET /chat/{id}/events; a plain form gets a redirect to the conversation, which shows the
turn as far as it got. Closing the page does not stop the turn; reopening it re-attaches.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Annotated

from fastapi import APIRouter, Form, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from markupsafe import escape
from sqlmodel import Session
from sse_starlette import EventSourceResponse, ServerSentEvent
from starlette.datastructures import FormData, UploadFile

from mlx_manager.deps import RowId, SessionDep
from mlx_manager.records import Conversation
from mlx_manager.services.chat_images import remove_unreferenced, store_images, vision_model_ids
from mlx_manager.services.chat_jobs import ChatJob, follow, get_chat_jobs
from mlx_manager.services.chat_options import ChatForm, ChatOptions, OptionsError
from mlx_manager.services.chat_runner import manual_result, run_turn
from mlx_manager.services.conversations import (
    ConversationError,
    add_message,
    create_conversation,
    get_conversation,
    last_user_position,
    messages_of,
    pending_tool_calls,
    rewind_to,
    update_settings,
)
from mlx_manager.services.forms import FormError
from mlx_manager.services.jobs import JobRunning
from mlx_manager.web.chat_pages import chat_response, thread_html, turn_html
from mlx_manager.web.templating import wants_fragment
from mlx_server.facade import get_model, remote_model_ids

router = APIRouter(prefix="/chat")
ComposerForm = Annotated[ChatForm, Form()]

PING_SECONDS = 15
STOP_SECONDS = 10  # a stopped reply ends within a token; the answer shows it saved


@router.post("/send", response_class=HTMLResponse)
async def send_first(request: Request, session: SessionDep, form: ComposerForm) -> Response:
    """The first message of a new chat: the conversation is created with it."""
    uploads = await _uploads(await request.form())
    try:
        options, model_id, content = _composer(session, form, uploads)
        images = store_images(uploads)
    except (FormError, OptionsError) as exc:
        return chat_response(request, session, None, error=str(exc), status=400, draft=form.content)
    conversation = create_conversation(
        session,
        model_id=model_id,
        system_prompt=form.system_prompt or None,
        parameters=options.stored(),
    )
    add_message(session, conversation, "user", content, images=images or None)
    assert conversation.id is not None
    _start(conversation.id, options)
    # A new page (its URL, title and sidebar entry): htmx follows the redirect like a link.
    return RedirectResponse(f"/chat/{conversation.id}", status_code=303)


@router.post("/{conversation_id}/send", response_class=HTMLResponse)
async def send(request: Request, session: SessionDep, conversation_id: RowId, form: ComposerForm) -> Response:
    uploads = await _uploads(await request.form())

    def act(session: Session, conversation: Conversation) -> ChatOptions:
        options, model_id, content = _composer(session, form, uploads)
        images = store_images(uploads)
        system_prompt = form.system_prompt
        update_settings(
            session, conversation, model_id=model_id, system_prompt=system_prompt, parameters=options.stored()
        )
        add_message(session, conversation, "user", content, images=images or None)
        return options

    return _when_idle(request, session, conversation_id, act, draft=form.content)


@router.post("/{conversation_id}/regenerate", response_class=HTMLResponse)
async def regenerate(request: Request, session: SessionDep, conversation_id: RowId) -> Response:
    """Answer the last user message again (its earlier answers are replaced)."""

    def act(session: Session, conversation: Conversation) -> ChatOptions:
        rewind_to(session, conversation, last_user_position(messages_of(session, conversation_id)) + 1)
        return ChatOptions.from_stored(conversation.parameters)

    return _when_idle(request, session, conversation_id, act)


@router.post("/{conversation_id}/messages/{position}/edit", response_class=HTMLResponse)
async def edit(request: Request, session: SessionDep, conversation_id: RowId, position: RowId) -> Response:
    """Change a user message and resend from there (everything after it is dropped)."""
    content = _text(await request.form(), "content").strip()

    def act(session: Session, conversation: Conversation) -> ChatOptions:
        target = next((m for m in messages_of(session, conversation_id) if m.position == position), None)
        if target is None or target.role != "user":
            raise ConversationError("Only your own messages can be edited.")
        if not content and not target.images:
            raise ConversationError("An edited message cannot be empty.")
        dropped = rewind_to(session, conversation, position)
        add_message(session, conversation, "user", content, images=target.images)  # images kept
        remove_unreferenced(session, dropped)
        return ChatOptions.from_stored(conversation.parameters)

    return _when_idle(request, session, conversation_id, act)


@router.post("/{conversation_id}/tool-result", response_class=HTMLResponse)
async def tool_result(request: Request, session: SessionDep, conversation_id: RowId) -> Response:
    """A result typed for a pending call (manual mode); the turn goes on once all are answered."""
    form = await request.form()

    def act(session: Session, conversation: Conversation) -> ChatOptions | None:
        manual_result(conversation_id, _text(form, "tool_call_id"), _text(form, "content"))
        if pending_tool_calls(messages_of(session, conversation_id)):
            return None  # more calls wait for their results
        return ChatOptions.from_stored(conversation.parameters)

    return _when_idle(request, session, conversation_id, act)


@router.post("/{conversation_id}/stop", response_class=HTMLResponse)
async def stop(request: Request, session: SessionDep, conversation_id: RowId) -> Response:
    """Stop the reply being generated; it is kept, marked stopped."""
    job = get_chat_jobs().running(conversation_id)
    if job is not None:
        job.stop.set()
        await job.ended_within(STOP_SECONDS)
    conversation = get_conversation(session, conversation_id)
    if conversation is None:
        return chat_response(request, session, None, error="There is no such conversation.", status=404)
    return _answer(request, session, conversation)


@router.get("/{conversation_id}/events")
async def events(request: Request, conversation_id: RowId) -> Response:
    """The running turn as server-sent events: "turn" (its HTML so far), "content" and
    "reasoning" (text to append), then "done" (the conversation's thread as it ended)."""
    job = get_chat_jobs().running(conversation_id)

    async def stream() -> AsyncIterator[ServerSentEvent]:
        if job is not None:
            async for kind, text in follow(job):
                if kind == "done":
                    break
                yield ServerSentEvent(
                    event=kind, data=turn_html(request, job) if kind == "turn" else escape(text)
                )
        yield ServerSentEvent(event="done", data=thread_html(request, conversation_id))

    return EventSourceResponse(stream(), ping=PING_SECONDS, headers={"Cache-Control": "no-cache"})


# --- Helpers ---


def _composer(
    session: Session, form: ChatForm, uploads: list[tuple[str, bytes]]
) -> tuple[ChatOptions, str, str]:
    """The composer's options, model and message; FormError says what to fix."""
    options = form.options()
    model_id = form.model_id
    record = get_model(session, model_id)
    remote = record is None and model_id in {m for m, _ in remote_model_ids(session)}
    if record is None and not remote:
        raise FormError(f"There is no model {model_id!r}; pick one from the list.")
    if uploads and (record is None or not vision_model_ids(session, [record])):
        raise FormError(
            f"The model {model_id} reads text only, not images: pick a vision model or remove the images."
        )
    content = form.content.strip()
    if not content and not uploads:
        raise FormError("Type a message first.")
    return options, model_id, content


async def _uploads(form: FormData) -> list[tuple[str, bytes]]:
    """The images attached in the composer (an empty file field sends a nameless empty part)."""
    files = [value for value in form.getlist("images") if isinstance(value, UploadFile)]
    return [(file.filename or "", await file.read()) for file in files if file.filename or file.size]


def _when_idle(
    request: Request,
    session: Session,
    conversation_id: int,
    act: Callable[[Session, Conversation], ChatOptions | None],
    *,
    draft: str = "",
) -> Response:
    """Run `act` on the conversation if it exists and no reply is being generated for it, then
    start the turn with the options it returns (None: nothing to generate yet). A ValueError
    from `act` is the refusal the page shows (400), the message the user typed kept."""
    conversation = get_conversation(session, conversation_id)
    if conversation is None:
        return chat_response(request, session, None, error="There is no such conversation.", status=404)
    if get_chat_jobs().running(conversation_id):
        message = "Stop the reply being generated first."
        return chat_response(request, session, conversation, error=message, status=409)
    try:
        options = act(session, conversation)
    except ValueError as exc:  # FormError, OptionsError, ConversationError
        return chat_response(request, session, conversation, error=str(exc), status=400, draft=draft)
    if options is None:
        return _answer(request, session, conversation)
    return _started(request, session, conversation, options)


def _start(conversation_id: int, options: ChatOptions) -> ChatJob:
    async def work(job: ChatJob) -> None:
        await run_turn(job, options)

    return get_chat_jobs().start(ChatJob(conversation_id), work)


def _started(
    request: Request, session: Session, conversation: Conversation, options: ChatOptions
) -> Response:
    assert conversation.id is not None
    try:
        _start(conversation.id, options)
    except JobRunning:
        message = "A reply is being generated; stop it or wait for it to finish."
        return chat_response(request, session, conversation, error=message, status=409)
    return _answer(request, session, conversation)


def _answer(request: Request, session: Session, conversation: Conversation) -> Response:
    """htmx gets the thread (following the turn, if one runs); a plain form goes back to the page."""
    if wants_fragment(request):
        return chat_response(request, session, conversation)
    return RedirectResponse(f"/chat/{conversation.id}", status_code=303)


def _text(form: FormData, name: str) -> str:
    value = form.get(name, "")
    return value if isinstance(value, str) else ""
