"""Manager-owned tables: playground conversations and their messages, hub download jobs, the
dashboard's admin account, MCP servers, model benchmarks."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Any

from sqlalchemy import JSON, Column, ForeignKey, Integer, String
from sqlmodel import Field, SQLModel

from mlx_server.facade import utcnow


class Conversation(SQLModel, table=True):
    __tablename__ = "conversations"

    id: int | None = Field(default=None, primary_key=True)
    title: str = Field(default="New chat", max_length=255)
    model_id: str | None = Field(default=None, max_length=255)
    system_prompt: str | None = None
    parameters: dict[str, Any] = Field(default_factory=dict, sa_column=Column(JSON, nullable=False))
    created_at: datetime = Field(default_factory=utcnow)
    updated_at: datetime = Field(default_factory=utcnow, index=True)


class MessageStatus(StrEnum):
    """Where a stored message stands: an assistant reply is saved as it grows (running), and
    keeps what was generated when the user stops it or a restart cuts it."""

    RUNNING = "running"
    DONE = "done"
    STOPPED = "stopped"
    INTERRUPTED = "interrupted"


class ConversationMessage(SQLModel, table=True):
    """One message of a playground conversation (the OpenAI request schema is `ChatMessage`)."""

    __tablename__ = "chat_messages"

    id: int | None = Field(default=None, primary_key=True)
    conversation_id: int = Field(
        sa_column=Column(
            Integer, ForeignKey("conversations.id", ondelete="CASCADE"), nullable=False, index=True
        )
    )
    position: int
    role: str = Field(max_length=32)
    content: str = ""
    reasoning: str | None = None
    tool_calls: list[dict[str, Any]] | None = Field(default=None, sa_column=Column(JSON))
    tool_call_id: str | None = Field(default=None, max_length=128)
    stats: dict[str, Any] | None = Field(default=None, sa_column=Column(JSON))
    # Attached images: [{"sha256", "media_type", "width", "height"}], their bytes in the home
    # directory's chat-images/ (services/chat_images.py).
    images: list[dict[str, Any]] | None = Field(default=None, sa_column=Column(JSON))
    # Stored as its value ("running"), like DownloadJob.status.
    status: MessageStatus = Field(default=MessageStatus.DONE, sa_type=String(16), index=True)
    created_at: datetime = Field(default_factory=utcnow)


class DownloadStatus(StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"


class DownloadJob(SQLModel, table=True):
    """One hub download (services/downloads.py); queued and running jobs resume at start."""

    __tablename__ = "download_jobs"

    id: int | None = Field(default=None, primary_key=True)
    repo_id: str = Field(index=True, max_length=255)
    revision: str = Field(default="main", max_length=255)
    # Stored as its value ("running"), not the enum member name.
    status: DownloadStatus = Field(default=DownloadStatus.QUEUED, sa_type=String(16), index=True)
    bytes_done: int = 0
    bytes_total: int | None = None
    # What went wrong and what to do about it (failed jobs only).
    error: str | None = None
    # The registered model, once completed.
    model_id: str | None = Field(default=None, max_length=255)
    created_at: datetime = Field(default_factory=utcnow)
    updated_at: datetime = Field(default_factory=utcnow)


class AdminAccount(SQLModel, table=True):
    """The dashboard's one admin account (a single row, id 1): the password's argon2 hash, the
    secret session cookies are signed with, and the session version every cookie carries; a new
    password makes a new secret and logout raises the version, either of which ends every
    session (migration 0015)."""

    __tablename__ = "admin_account"

    id: int = Field(default=1, primary_key=True)
    password_hash: str = Field(max_length=255)
    session_secret: str = Field(max_length=64)
    session_version: int = 0
    updated_at: datetime = Field(default_factory=utcnow)


class McpTransport(StrEnum):
    STDIO = "stdio"
    HTTP = "http"  # streamable HTTP


class McpServer(SQLModel, table=True):
    """An MCP server whose tools the playground's agent loop may call (services/mcp_servers.py).
    `env` and `headers` values are secrets: stored, never rendered back or logged."""

    __tablename__ = "mcp_servers"

    id: int | None = Field(default=None, primary_key=True)
    name: str = Field(max_length=64, sa_column_kwargs={"unique": True}, index=True)
    transport: McpTransport = Field(sa_type=String(8))
    command: str | None = None  # stdio
    args: list[str] = Field(default_factory=list, sa_column=Column(JSON, nullable=False))
    env: dict[str, str] = Field(default_factory=dict, sa_column=Column(JSON, nullable=False))
    url: str | None = None  # streamable HTTP
    headers: dict[str, str] = Field(default_factory=dict, sa_column=Column(JSON, nullable=False))
    created_at: datetime = Field(default_factory=utcnow)
    updated_at: datetime = Field(default_factory=utcnow)


class ModelBenchmark(SQLModel, table=True):
    """One benchmark run of a model (services/model_benchmarks.py): a fixed prompt and number of
    generated tokens through the server's engine, and what they measured (migration 0020). The
    rows outlive their model: a deleted model's figures stay comparable."""

    __tablename__ = "model_benchmarks"

    id: int | None = Field(default=None, primary_key=True)
    model_id: str = Field(max_length=255, index=True)
    prompt_tokens: int
    generated_tokens: int
    ttft_s: float
    prefill_tokens_per_s: float
    decode_tokens_per_s: float
    peak_memory_bytes: int
    model_bytes: int
    load_s: float | None = None  # None: the model was loaded already
    device: str = Field(max_length=255)
    versions: str = Field(max_length=255)
    created_at: datetime = Field(default_factory=utcnow, index=True)
