"""Chat playground pages: a new chat ready to type, the conversation view, the sidebar's list
(rename, delete), system prompt presets, exports and attached images. Turns are in chat_stream.py."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Form, Request
from fastapi.responses import FileResponse, HTMLResponse, PlainTextResponse, RedirectResponse, Response

from mlx_manager.deps import SQLITE_MAX_INT, RowId, SessionDep
from mlx_manager.records import Conversation
from mlx_manager.services.chat_images import image_file
from mlx_manager.services.chat_jobs import get_chat_jobs
from mlx_manager.services.conversations import (
    ConversationError,
    delete_conversation,
    export_json,
    export_markdown,
    get_conversation,
    messages_of,
    rename_conversation,
)
from mlx_manager.services.presets import PresetError, delete_preset, list_presets, save_preset
from mlx_manager.web.chat_pages import chat_response
from mlx_manager.web.templating import render, wants_fragment

router = APIRouter(prefix="/chat")


def _conversation_or_404(
    request: Request, session: SessionDep, conversation_id: int
) -> Conversation | Response:
    conversation = get_conversation(session, conversation_id)
    if conversation is None:
        message = f"There is no conversation {conversation_id}; pick one on the left."
        return chat_response(request, session, None, error=message, status=404)
    return conversation


@router.get("", response_class=HTMLResponse)
def chat_home(request: Request, session: SessionDep) -> Response:
    """A new chat, ready to type: the last-used model and settings; the first message creates it."""
    return chat_response(request, session, None)


@router.get("/{conversation_id}", response_class=HTMLResponse)
def chat_page(request: Request, session: SessionDep, conversation_id: RowId) -> Response:
    found = _conversation_or_404(request, session, conversation_id)
    return found if isinstance(found, Response) else chat_response(request, session, found)


@router.post("/{conversation_id}/rename", response_class=HTMLResponse)
def rename(
    request: Request, session: SessionDep, conversation_id: RowId, title: Annotated[str, Form()]
) -> Response:
    found = _conversation_or_404(request, session, conversation_id)
    if isinstance(found, Response):
        return found
    try:
        rename_conversation(session, found, title)
    except ConversationError as exc:
        return chat_response(request, session, found, error=str(exc), status=400)
    return RedirectResponse(f"/chat/{conversation_id}", status_code=303)


@router.post("/{conversation_id}/delete", response_class=HTMLResponse)
def delete(request: Request, session: SessionDep, conversation_id: RowId) -> Response:
    found = _conversation_or_404(request, session, conversation_id)
    if isinstance(found, Response):
        return found
    if get_chat_jobs().running(conversation_id):
        message = "A reply is being generated; stop it before deleting the chat."
        return chat_response(request, session, found, error=message, status=409)
    delete_conversation(session, found)
    get_chat_jobs().forget(conversation_id)
    return RedirectResponse("/chat", status_code=303)


@router.get("/images/{sha256}")
def image(sha256: str) -> Response:
    """An image attached to a message (named by the sha256 of its bytes, so it never changes)."""
    found = image_file(sha256)
    if found is None:
        return PlainTextResponse("There is no such image; it went with the last message attaching it.", 404)
    headers = {"Cache-Control": "private, max-age=31536000, immutable", "X-Content-Type-Options": "nosniff"}
    return FileResponse(found[0], media_type=found[1], headers=headers)


@router.get("/{conversation_id}/export.{kind}")
def export(request: Request, session: SessionDep, conversation_id: RowId, kind: str) -> Response:
    found = _conversation_or_404(request, session, conversation_id)
    if isinstance(found, Response):
        return found
    if kind not in ("md", "json"):
        return chat_response(request, session, found, error="Export as .md or .json.", status=400)
    messages = messages_of(session, conversation_id)
    body, media = (
        (export_markdown(found, messages), "text/markdown")
        if kind == "md"
        else (export_json(found, messages), "application/json")
    )
    headers = {"Content-Disposition": f'attachment; filename="chat-{conversation_id}.{kind}"'}
    return Response(body, media_type=f"{media}; charset=utf-8", headers=headers)


@router.post("/presets", response_class=HTMLResponse)
def add_preset(
    request: Request,
    session: SessionDep,
    name: Annotated[str, Form()],
    text: Annotated[str, Form()],
    conversation_id: Annotated[int | None, Form(ge=0, le=SQLITE_MAX_INT)] = None,
) -> Response:
    try:
        save_preset(session, name, text)
    except PresetError as exc:
        conversation = get_conversation(session, conversation_id) if conversation_id else None
        return chat_response(request, session, conversation, error=str(exc), status=400)
    if wants_fragment(request):
        return render(request, "partials/chat_presets.html", presets=list_presets(session))
    return RedirectResponse(f"/chat/{conversation_id}" if conversation_id else "/chat", status_code=303)


@router.post("/presets/delete", response_class=HTMLResponse)
def remove_preset(
    request: Request,
    session: SessionDep,
    name: Annotated[str, Form()],
    conversation_id: Annotated[int | None, Form(ge=0, le=SQLITE_MAX_INT)] = None,
) -> Response:
    delete_preset(session, name)
    return RedirectResponse(f"/chat/{conversation_id}" if conversation_id else "/chat", status_code=303)
