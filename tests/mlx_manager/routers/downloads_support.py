"""Waiting on download jobs in tests (every loop bounded by a deadline)."""

from __future__ import annotations

from pathlib import Path

from sqlmodel import Session, select

from mlx_manager.records import DownloadJob, DownloadStatus
from mlx_server.database import get_engine
from mlx_server.records import ModelRecord
from tests.support import wait_for


def job(job_id: int) -> DownloadJob:
    with Session(get_engine()) as session:
        row = session.get(DownloadJob, job_id)
        assert row is not None
        return row


def wait_for_status(job_id: int, status: DownloadStatus, timeout: float = 60) -> DownloadJob:
    wait_for(lambda: job(job_id).status == status, timeout, f"download {job_id} to be {status}")
    return job(job_id)


def all_jobs() -> list[DownloadJob]:
    with Session(get_engine()) as session:
        return list(session.exec(select(DownloadJob)))


def models() -> list[ModelRecord]:
    with Session(get_engine()) as session:
        return list(session.exec(select(ModelRecord)))


def partial_bytes(cache: Path) -> int:
    """Bytes in the cache's partial (`.incomplete`) files."""
    return sum(p.stat().st_size for p in cache.rglob("*.incomplete"))
