"""The audit page's query string: filter fields as a form sends them, checked and explained.

Every field is text and empty means "any"; a value that cannot be read becomes a message
that says what to type instead, never an exception.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from urllib.parse import urlencode

from mlx_server.facade import AuditFilter

FILTER_FIELDS = ("model", "endpoint", "status", "since", "until")
ERROR_STATUSES = ("error", "errors")
_STATUS_CLASS = re.compile(r"[1-5]xx")
_EXAMPLE_TIME = "2026-11-22T10:30"


@dataclass(frozen=True)
class AuditPageQuery:
    """The filters of one request to the audit pages, with the form's values and any errors."""

    values: dict[str, str]
    filters: AuditFilter = field(default_factory=AuditFilter)
    errors: list[str] = field(default_factory=list)
    live: bool = False
    before_id: int | None = None
    after_id: int | None = None

    def query_string(self, **extra: object) -> str:
        """The filters (non-empty ones) plus `extra`, URL-encoded: for links and the live tail."""
        params = {name: value for name, value in self.values.items() if value}
        params.update({name: str(value) for name, value in extra.items() if value is not None})
        return urlencode(params)


def parse_audit_page_query(params: Mapping[str, str]) -> AuditPageQuery:
    """Read the filters from a query string; problems are collected in `errors`."""
    values = {name: params.get(name, "").strip() for name in FILTER_FIELDS}
    errors: list[str] = []
    status, status_class, errors_only = _status(values["status"], errors)
    since = _time("Since", values["since"], errors)
    until = _time("Until", values["until"], errors)
    if since is not None and until is not None and since >= until:
        errors.append("Since must be earlier than Until.")
    if since is not None:  # shown back in the datetime-local input, which takes no offset
        values["since"] = _form_time(since)
    if until is not None:
        values["until"] = _form_time(until)
    filters = AuditFilter(
        model=values["model"] or None,
        endpoint=values["endpoint"] or None,
        status=status,
        status_class=status_class,
        errors_only=errors_only,
        since=since,
        until=until,
    )
    return AuditPageQuery(
        values=values,
        filters=filters,
        errors=errors,
        live=params.get("live", "") in ("1", "on", "true"),
        before_id=_row_id("before_id", params.get("before_id", ""), errors),
        after_id=_row_id("after_id", params.get("after_id", ""), errors),
    )


def _status(text: str, errors: list[str]) -> tuple[int | None, str | None, bool]:
    """(exact code, class, errors only) from "404", "4xx" or "error"."""
    lowered = text.lower()
    if not lowered:
        return None, None, False
    if lowered in ERROR_STATUSES:
        return None, None, True
    if _STATUS_CLASS.fullmatch(lowered):
        return None, lowered, False
    if lowered.isdigit() and 100 <= int(lowered) <= 599:
        return int(lowered), None, False
    errors.append(f'Status "{text}" is not a code (404), a class (4xx) or "error".')
    return None, None, False


def _time(label: str, text: str, errors: list[str]) -> datetime | None:
    """An ISO 8601 date or date-time; without an offset it is UTC (the times the page shows)."""
    if not text:
        return None
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        errors.append(
            f'{label} "{text}" is not a date and time: use {_EXAMPLE_TIME} (UTC) or ISO 8601 with an offset.'
        )
        return None
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


def _form_time(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%S" if moment.second else "%Y-%m-%dT%H:%M")


def _row_id(name: str, text: str, errors: list[str]) -> int | None:
    if not text:
        return None
    if text.isdigit():
        return int(text)
    errors.append(f'{name} "{text}" is not a row id (a whole number); start again from the newest rows.')
    return None
