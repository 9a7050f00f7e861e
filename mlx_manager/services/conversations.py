"""Playground conversations in the database: create, list, rename, delete, append, rewind,
and the message dicts the inference pipeline takes; Markdown and JSON export."""

from __future__ import annotations

import json
from typing import Any

from sqlmodel import Session, col, delete, func, select, update

from mlx_manager.records import Conversation, ConversationMessage, MessageStatus
from mlx_manager.services.chat_images import attached, data_url, remove_unreferenced
from mlx_manager.services.chat_options import ChatOptions
from mlx_manager.services.model_defaults_form import chat_parameters
from mlx_manager.services.settings_store import get_chat_defaults
from mlx_server.facade import ImagePart, Message, TextPart, ToolCall, utcnow

TITLE_CHARS = 60
NEW_TITLE = "New chat"


class ConversationError(ValueError):
    """A conversation operation was refused; the message says what to do."""


def list_conversations(session: Session) -> list[Conversation]:
    return list(session.exec(select(Conversation).order_by(col(Conversation.updated_at).desc())))


def get_conversation(session: Session, conversation_id: int) -> Conversation | None:
    return session.get(Conversation, conversation_id)


def create_conversation(
    session: Session,
    *,
    model_id: str | None,
    system_prompt: str | None = None,
    parameters: dict[str, Any] | None = None,
) -> Conversation:
    conversation = Conversation(model_id=model_id, system_prompt=system_prompt, parameters=parameters or {})
    session.add(conversation)
    session.commit()
    session.refresh(conversation)
    return conversation


def fresh_conversation(session: Session, model_ids: list[str]) -> Conversation:
    """What the composer of a new chat starts with (not stored until the first message): the
    latest conversation's model, system prompt and tools, the settings page's sampling defaults,
    and over them the model's own defaults (its page's sampling, max tokens and thinking)."""
    latest = next(iter(list_conversations(session)), None)
    model = latest.model_id if latest and latest.model_id in model_ids else next(iter(model_ids), None)
    return Conversation(
        model_id=model,
        system_prompt=latest.system_prompt if latest else None,
        parameters={
            **(latest.parameters if latest else ChatOptions().stored()),
            **get_chat_defaults(session),
            **chat_parameters(session, model),
        },
    )


def rename_conversation(session: Session, conversation: Conversation, title: str) -> Conversation:
    title = " ".join(title.split())
    if not title:
        raise ConversationError("A title cannot be empty.")
    conversation.title = title[:255]
    session.add(conversation)
    session.commit()
    return conversation


def delete_conversation(session: Session, conversation: Conversation) -> None:
    images = attached(messages_of(session, conversation.id)) if conversation.id else set()
    # Explicit: SQLite enforces ON DELETE CASCADE only with a per-connection pragma.
    session.exec(
        delete(ConversationMessage).where(col(ConversationMessage.conversation_id) == conversation.id)
    )
    session.delete(conversation)
    session.commit()
    remove_unreferenced(session, images)


def update_settings(
    session: Session,
    conversation: Conversation,
    *,
    model_id: str,
    system_prompt: str,
    parameters: dict[str, Any],
) -> None:
    conversation.model_id = model_id
    conversation.system_prompt = system_prompt or None
    conversation.parameters = parameters
    session.add(conversation)
    session.commit()


def messages_of(session: Session, conversation_id: int) -> list[ConversationMessage]:
    query = (
        select(ConversationMessage)
        .where(ConversationMessage.conversation_id == conversation_id)
        .order_by(col(ConversationMessage.position))
    )
    return list(session.exec(query))


def add_message(
    session: Session, conversation: Conversation, role: str, content: str = "", **fields: Any
) -> ConversationMessage:
    """Append a message; the first user message names a conversation still called "New chat"."""
    assert conversation.id is not None
    last = session.exec(
        select(func.max(ConversationMessage.position)).where(
            ConversationMessage.conversation_id == conversation.id
        )
    ).one()
    message = ConversationMessage(
        conversation_id=conversation.id, position=(last or 0) + 1, role=role, content=content, **fields
    )
    if role == "user" and conversation.title == NEW_TITLE and content.strip():
        text = " ".join(content.split())
        conversation.title = text if len(text) <= TITLE_CHARS else text[: TITLE_CHARS - 1] + "…"
    conversation.updated_at = utcnow()
    session.add(message)
    session.add(conversation)
    session.commit()
    session.refresh(message)
    return message


def save_message(session: Session, message: ConversationMessage) -> None:
    """Store the current state of a message (a reply as it grows, then as it ended)."""
    session.add(message)
    session.commit()


def mark_interrupted(session: Session) -> int:
    """Replies still marked running when the app starts were cut by a restart: say so."""
    query = (
        update(ConversationMessage)
        .where(col(ConversationMessage.status) == MessageStatus.RUNNING)
        .values(status=MessageStatus.INTERRUPTED)
    )
    count = session.exec(query).rowcount
    session.commit()
    return int(count or 0)


def rewind_to(session: Session, conversation: Conversation, position: int) -> set[str]:
    """Drop every message from `position` on (regenerate, edit and resend); returns the images
    they attached (for remove_unreferenced once the caller has stored what it keeps)."""
    assert conversation.id is not None
    images = attached([m for m in messages_of(session, conversation.id) if m.position >= position])
    session.exec(
        delete(ConversationMessage).where(
            col(ConversationMessage.conversation_id) == conversation.id,
            col(ConversationMessage.position) >= position,
        )
    )
    session.commit()
    return images


def last_user_position(messages: list[ConversationMessage]) -> int:
    for message in reversed(messages):
        if message.role == "user":
            return message.position
    raise ConversationError("There is no user message to answer yet; send one first.")


def pipeline_messages(conversation: Conversation, messages: list[ConversationMessage]) -> tuple[Message, ...]:
    """The conversation as generate_chat_completion takes it, reasoning and tool calls included."""
    system = (Message("system", conversation.system_prompt),) if conversation.system_prompt else ()
    return (*system, *(_pipeline_message(message) for message in messages))


def _pipeline_message(message: ConversationMessage) -> Message:
    content = _with_images(message) if message.images else message.content
    if message.role == "tool":
        return Message("tool", content, tool_call_id=message.tool_call_id)
    if message.role != "assistant":
        return Message("system" if message.role == "system" else "user", content)
    calls = tuple(stored_calls(message))
    return Message(
        "assistant",
        (message.content or None) if calls else content,
        tool_calls=calls,
        reasoning=message.reasoning or None,
    )


def _with_images(message: ConversationMessage) -> tuple[TextPart | ImagePart, ...]:
    """The images (as data: URLs) before the text, as the composer shows them."""
    parts: list[TextPart | ImagePart] = []
    for image in message.images or []:
        url = data_url(image)
        if url is None:
            parts.append(TextPart("(An attached image is missing from the home directory.)"))
        else:
            parts.append(ImagePart(url))
    return (*parts, TextPart(message.content))


def stored_calls(message: ConversationMessage) -> list[ToolCall]:
    """The message's tool calls as ToolCall objects (its row keeps them as JSON, with the
    playground's own mark: "rejected", the card's reason)."""
    return [
        ToolCall.model_validate({k: v for k, v in call.items() if k != "rejected"})
        for call in message.tool_calls or ()
    ]


def pending_tool_calls(messages: list[ConversationMessage]) -> list[ToolCall]:
    """Calls of the last assistant message that have no result yet (manual mode)."""
    answered = set()
    for message in reversed(messages):
        if message.role == "tool":
            answered.add(message.tool_call_id)
        elif message.role == "assistant":
            return [call for call in stored_calls(message) if call.id not in answered]
        else:
            return []
    return []


# --- Export ---


def export_json(conversation: Conversation, messages: list[ConversationMessage]) -> str:
    body = {
        "id": conversation.id,
        "title": conversation.title,
        "model": conversation.model_id,
        "system_prompt": conversation.system_prompt,
        "parameters": conversation.parameters,
        "created_at": conversation.created_at.isoformat(),
        "messages": [
            {
                "role": m.role,
                "content": m.content,
                "reasoning": m.reasoning,
                "tool_calls": m.tool_calls,
                "tool_call_id": m.tool_call_id,
                "images": [{**image, "url": data_url(image)} for image in m.images or []],
                "stats": m.stats,
                "status": m.status,
                "created_at": m.created_at.isoformat(),
            }
            for m in messages
        ],
    }
    return json.dumps(body, ensure_ascii=False, indent=2)


def export_markdown(conversation: Conversation, messages: list[ConversationMessage]) -> str:
    lines = [f"# {conversation.title}", "", f"Model: `{conversation.model_id}`", ""]
    if conversation.system_prompt:
        lines += ["## System", "", conversation.system_prompt, ""]
    for message in messages:
        if message.role == "tool":
            lines += [f"### Tool result ({message.tool_call_id})", "", "```", message.content, "```", ""]
            continue
        lines += [f"## {message.role.capitalize()}", ""]
        for number, image in enumerate(message.images or [], start=1):
            lines += [f"![Image {number} ({image['width']}x{image['height']})]({data_url(image) or ''})", ""]
        if message.reasoning:
            quoted = "\n".join(f"> {line}" for line in message.reasoning.splitlines())
            lines += ["<details><summary>Reasoning</summary>", "", quoted, "", "</details>", ""]
        if message.content:
            lines += [message.content, ""]
        for call in message.tool_calls or []:
            function = call.get("function", {})
            lines += [f"Tool call `{function.get('name')}` ({call.get('id')}):", "", "```json"]
            lines += [_pretty(function.get("arguments", "{}")), "```", ""]
    return "\n".join(lines)


def _pretty(arguments: str) -> str:
    try:
        return json.dumps(json.loads(arguments), ensure_ascii=False, indent=2)
    except ValueError:
        return arguments
