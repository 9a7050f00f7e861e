"""What the chat pages show, gathered once as data: the page (sidebar, composer, parameters)
and the thread (stored messages, and the turn being generated, if any). web/chat_pages.py
renders it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sqlmodel import Session

from mlx_manager.records import Conversation, ConversationMessage
from mlx_manager.services.chat_images import vision_model_ids
from mlx_manager.services.chat_jobs import ChatJob, get_chat_jobs
from mlx_manager.services.chat_options import ChatOptions
from mlx_manager.services.chat_tools import BUILTIN_TOOLS
from mlx_manager.services.chat_voice import VoiceModels
from mlx_manager.services.conversations import (
    fresh_conversation,
    list_conversations,
    messages_of,
    pending_tool_calls,
)
from mlx_manager.services.embeddings_panel import embedding_models
from mlx_manager.services.mcp_servers import list_mcp_servers
from mlx_manager.services.presets import list_presets
from mlx_server.facade import ModelRecord, list_models, read_chat_template, remote_model_ids


def page_context(session: Session, conversation: Conversation | None) -> dict[str, Any]:
    """Everything chat.html needs; without a conversation, the composer of a new one."""
    embedding = set(embedding_models(session))  # served by the Embeddings panel, not chat
    audio = VoiceModels.of(session).audio  # speech models have the mic and read-aloud buttons
    models = [m for m in list_models(session) if m.id not in embedding and m.id not in audio]
    remote = [model_id for model_id, _ in remote_model_ids(session)]  # served by remote backends
    shown = conversation or fresh_conversation(session, [m.id for m in models] + remote)
    return {
        "conversations": list_conversations(session),
        "models": models,
        "remote_models": remote,
        "vision_models": vision_model_ids(session, models),
        "thinking_toggle": _thinking_toggle(models, shown),
        "options": ChatOptions.from_stored(shown.parameters),
        "builtin_tools": BUILTIN_TOOLS,
        "mcp_servers": list_mcp_servers(session),
        "presets": list_presets(session),
        **thread_context(session, shown),
    }


def thread_context(session: Session, conversation: Conversation) -> dict[str, Any]:
    """The messages, the running turn (rendered apart: it is followed live) and the last turn's
    error; `busy` while a turn runs (the page's other actions wait for it)."""
    job = get_chat_jobs().get(conversation.id) if conversation.id else None
    running = job if job is not None and not job.finished else None
    stored = messages_of(session, conversation.id) if conversation.id else []
    in_turn = {m.id for m in running.messages} if running else set()
    return {
        "conversation": conversation,
        "messages": [m for m in stored if m.role != "tool" and m.id not in in_turn],
        "results": results_by_call(stored),
        "pending_ids": [call.id for call in pending_tool_calls(stored)],
        "busy": running is not None,
        "voice": VoiceModels.of(session),
        "notice": job.error if job is not None and job.finished else None,
        **(turn_context(running) if running else {"job": None}),
    }


def turn_context(job: ChatJob) -> dict[str, Any]:
    """The turn being generated: the replies it added so far and their tool results."""
    return {
        "job": job,
        "turn_messages": [m for m in job.messages if m.role != "tool"],
        "turn_results": results_by_call(job.messages),
    }


def results_by_call(messages: list[ConversationMessage]) -> dict[str, ConversationMessage]:
    """Tool results by the id of the call they answer (shown on the call's card)."""
    return {m.tool_call_id: m for m in messages if m.role == "tool" and m.tool_call_id}


def _thinking_toggle(models: list[ModelRecord], conversation: Conversation) -> bool:
    """Whether the conversation's model has a thinking switch in its chat template."""
    record = next((m for m in models if m.id == conversation.model_id), None)
    return record is not None and "enable_thinking" in read_chat_template(Path(record.path))
