"""Chat playground pages: the conversation view, the sidebar's list (new, rename, delete),
system prompt presets, and exports. Generating replies is in chat_stream.py."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

from fastapi import APIRouter, Form, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from sqlmodel import Session

from mlx_manager.records import ChatMessage, Conversation
from mlx_manager.services.chat_options import ChatOptions
from mlx_manager.services.chat_runner import chat_runs
from mlx_manager.services.chat_tools import BUILTIN_TOOLS
from mlx_manager.services.conversations import (
    ConversationError,
    create_conversation,
    delete_conversation,
    export_json,
    export_markdown,
    get_conversation,
    list_conversations,
    messages_of,
    pending_tool_calls,
    rename_conversation,
)
from mlx_manager.services.presets import PresetError, delete_preset, list_presets, save_preset
from mlx_manager.services.settings_store import get_chat_defaults
from mlx_manager.web.templating import render, wants_fragment
from mlx_server.database import SessionDep
from mlx_server.models.detection import read_chat_template
from mlx_server.models.store import list_models

router = APIRouter(prefix="/chat")


def page(
    request: Request, session: Session, conversation: Conversation | None, *, error: str | None = None
) -> HTMLResponse:
    models = list_models(session)
    messages = messages_of(session, conversation.id) if conversation and conversation.id else []
    options = ChatOptions.from_stored(conversation.parameters) if conversation else ChatOptions()
    response = render(
        request,
        "chat.html",
        conversation=conversation,
        conversations=list_conversations(session),
        models=models,
        thinking_toggle=_thinking_toggle(models, conversation),
        messages=[m for m in messages if m.role != "tool"],
        results=_results(messages),
        pending=pending_tool_calls(messages),
        options=options,
        builtin_tools=BUILTIN_TOOLS,
        presets=list_presets(session),
        running=bool(conversation and conversation.id and chat_runs.running(conversation.id)),
        error=error,
    )
    if error:
        response.status_code = 400
    return response


def _results(messages: list[ChatMessage]) -> dict[str, ChatMessage]:
    """Tool results by the id of the call they answer (shown on the call's card)."""
    return {m.tool_call_id: m for m in messages if m.role == "tool" and m.tool_call_id}


def _thinking_toggle(models: list[Any], conversation: Conversation | None) -> bool:
    """Whether the conversation's model has a thinking switch in its chat template."""
    record = next((m for m in models if conversation and m.id == conversation.model_id), None)
    return record is not None and "enable_thinking" in read_chat_template(Path(record.path))


def _conversation_or_404(request: Request, session: Session, conversation_id: int) -> Conversation | Response:
    conversation = get_conversation(session, conversation_id)
    if conversation is None:
        response = page(
            request, session, None, error=f"There is no conversation {conversation_id}; pick one on the left."
        )
        response.status_code = 404
        return response
    return conversation


@router.get("", response_class=HTMLResponse)
def chat_home(request: Request, session: SessionDep) -> Response:
    conversations = list_conversations(session)
    if conversations:
        return RedirectResponse(f"/chat/{conversations[0].id}", status_code=303)
    return page(request, session, None)


@router.post("/new", response_class=HTMLResponse)
def new_chat(request: Request, session: SessionDep, model_id: Annotated[str, Form()] = "") -> Response:
    """A new conversation: the latest one's model, system prompt and tools (what a user keeps
    using), the sampling defaults from the settings page."""
    latest = next(iter(list_conversations(session)), None)
    models = [m.id for m in list_models(session)]
    model = (
        model_id if model_id in models else (latest.model_id if latest else None) or next(iter(models), None)
    )
    conversation = create_conversation(
        session,
        model_id=model,
        system_prompt=latest.system_prompt if latest else None,
        parameters={
            **(latest.parameters if latest else ChatOptions().stored()),
            **get_chat_defaults(session),
        },
    )
    return RedirectResponse(f"/chat/{conversation.id}", status_code=303)


@router.get("/{conversation_id}", response_class=HTMLResponse)
def chat_page(request: Request, session: SessionDep, conversation_id: int) -> Response:
    found = _conversation_or_404(request, session, conversation_id)
    return found if isinstance(found, Response) else page(request, session, found)


@router.post("/{conversation_id}/rename", response_class=HTMLResponse)
def rename(
    request: Request, session: SessionDep, conversation_id: int, title: Annotated[str, Form()]
) -> Response:
    found = _conversation_or_404(request, session, conversation_id)
    if isinstance(found, Response):
        return found
    try:
        rename_conversation(session, found, title)
    except ConversationError as exc:
        return page(request, session, found, error=str(exc))
    return RedirectResponse(f"/chat/{conversation_id}", status_code=303)


@router.post("/{conversation_id}/delete", response_class=HTMLResponse)
def delete(request: Request, session: SessionDep, conversation_id: int) -> Response:
    found = _conversation_or_404(request, session, conversation_id)
    if isinstance(found, Response):
        return found
    if chat_runs.running(conversation_id):
        return page(
            request, session, found, error="A reply is being generated; stop it before deleting the chat."
        )
    delete_conversation(session, found)
    return RedirectResponse("/chat", status_code=303)


@router.get("/{conversation_id}/export.{kind}")
def export(request: Request, session: SessionDep, conversation_id: int, kind: str) -> Response:
    found = _conversation_or_404(request, session, conversation_id)
    if isinstance(found, Response):
        return found
    if kind not in ("md", "json"):
        return page(request, session, found, error="Export as .md or .json.")
    messages = messages_of(session, conversation_id)
    body, media = (
        (export_markdown(found, messages), "text/markdown")
        if kind == "md"
        else (export_json(found, messages), "application/json")
    )
    filename = f"chat-{conversation_id}.{kind}"
    headers = {"Content-Disposition": f'attachment; filename="{filename}"'}
    return Response(body, media_type=f"{media}; charset=utf-8", headers=headers)


@router.post("/presets", response_class=HTMLResponse)
def add_preset(
    request: Request,
    session: SessionDep,
    name: Annotated[str, Form()],
    text: Annotated[str, Form()],
    conversation_id: Annotated[int | None, Form()] = None,
) -> Response:
    back = f"/chat/{conversation_id}" if conversation_id else "/chat"
    try:
        save_preset(session, name, text)
    except PresetError as exc:
        conversation = get_conversation(session, conversation_id) if conversation_id else None
        return page(request, session, conversation, error=str(exc))
    if wants_fragment(request):
        return render(request, "partials/chat_presets.html", presets=list_presets(session))
    return RedirectResponse(back, status_code=303)


@router.post("/presets/delete", response_class=HTMLResponse)
def remove_preset(
    request: Request,
    session: SessionDep,
    name: Annotated[str, Form()],
    conversation_id: Annotated[int | None, Form()] = None,
) -> Response:
    delete_preset(session, name)
    return RedirectResponse(f"/chat/{conversation_id}" if conversation_id else "/chat", status_code=303)
