"""Per-key limits: requests per minute (a sliding window in this process) and tokens per UTC day
(summed from the key's audit rows, so they hold across restarts and processes sharing the home).

A refused request is not counted. The tokens of a request count once its audit row is written,
so requests already running when the day's budget is reached may finish over it.
"""

from __future__ import annotations

import math
from datetime import datetime, timedelta

from sqlmodel import Session, col, func, select

from mlx_server.errors import APIError
from mlx_server.records import ApiKey, AuditLog, utcnow
from mlx_server.utils.sliding_window import SlidingWindow

WINDOW_SECONDS = 60.0


# Requests per minute, per key id (this process's).
request_windows = SlidingWindow(WINDOW_SECONDS)


def tokens_used_today(session: Session, key_name: str, now: datetime | None = None) -> int:
    """Prompt plus completion tokens of the key's requests since 00:00 UTC."""
    midnight = (now or utcnow()).replace(hour=0, minute=0, second=0, microsecond=0)
    used = session.exec(
        select(
            func.coalesce(func.sum(col(AuditLog.prompt_tokens)), 0)
            + func.coalesce(func.sum(col(AuditLog.completion_tokens)), 0)
        ).where(AuditLog.key_name == key_name, col(AuditLog.created_at) >= midnight)
    ).one()
    return int(used or 0)


def _too_many(message: str, retry_after: float) -> APIError:
    seconds = max(1, math.ceil(retry_after))
    return APIError(
        429,
        f"{message} Retry in {seconds} s.",
        code="rate_limit_exceeded",
        headers={"Retry-After": str(seconds)},
    )


def limit_refusal(session: Session, key: ApiKey, now: datetime | None = None) -> APIError | None:
    """A 429 with Retry-After when `key` is over one of its limits, else None (and the request
    counts towards the minute's)."""
    now = now or utcnow()
    if key.tokens_per_day is not None:
        used = tokens_used_today(session, key.name, now)
        if used >= key.tokens_per_day:
            tomorrow = (now + timedelta(days=1)).replace(hour=0, minute=0, second=0, microsecond=0)
            return _too_many(
                f"The API key {key.name!r} has used {used} of its {key.tokens_per_day} tokens for "
                "today (UTC).",
                (tomorrow - now).total_seconds(),
            )
    if key.requests_per_minute is not None and key.id is not None:
        wait = request_windows.admit(key.id, key.requests_per_minute)
        if wait is not None:
            return _too_many(
                f"The API key {key.name!r} is limited to {key.requests_per_minute} requests per minute.",
                wait,
            )
    return None
