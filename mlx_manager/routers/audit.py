"""The audit log pages: filtered list with "load more", detail, exports, live tail, retention."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Form, Request, status
from fastapi.responses import HTMLResponse, PlainTextResponse, RedirectResponse, Response, StreamingResponse
from sqlmodel import Session, col
from sse_starlette import EventSourceResponse
from starlette.concurrency import run_in_threadpool

from mlx_manager.deps import RowId, SessionDep
from mlx_manager.services.audit_filters import AuditPageQuery, parse_audit_page_query
from mlx_manager.services.audit_streams import csv_export, jsonl_export, live_tail
from mlx_manager.web.templating import render, templates, wants_fragment
from mlx_server.facade import (
    MAX_RETENTION_DAYS,
    AuditLog,
    audit_retention,
    audit_service,
    count_audit_rows,
    distinct_values,
    latest_id,
    page_before,
    set_audit_retention,
    utcnow,
)

router = APIRouter(prefix="/audit")

PAGE_SIZE = 50
# Live tails open at once; each holds a connection and wakes on every audit batch.
MAX_LIVE_TAILS = 16


def _page_context(session: Session, query: AuditPageQuery) -> dict[str, Any]:
    """Everything audit.html shows: one page of rows, the form's suggestions, the retention."""
    context: dict[str, Any] = {
        "query": query,
        "rows": [],
        "models": distinct_values(session, col(AuditLog.model)),
        "endpoints": distinct_values(session, col(AuditLog.endpoint)),
        "retention": audit_retention(session),
        "max_retention_days": MAX_RETENTION_DAYS,
        "filter_qs": query.query_string(),
    }
    if query.errors:
        return context
    head_id = latest_id(session)  # first: rows recorded from here on belong to the live tail
    before_id = query.before_id if query.before_id is not None else head_id + 1
    rows = page_before(session, query.filters, before_id=before_id, limit=PAGE_SIZE + 1)
    context.update(
        rows=rows[:PAGE_SIZE],
        next_before_id=rows[PAGE_SIZE - 1].id if len(rows) > PAGE_SIZE else None,
        total=count_audit_rows(session, query.filters),
        head_id=head_id,
    )
    return context


@router.get("", response_class=HTMLResponse)
def audit_page(request: Request, session: SessionDep) -> HTMLResponse:
    """Newest first, PAGE_SIZE rows; `before_id` gives the next page (htmx: just its rows)."""
    query = parse_audit_page_query(request.query_params)
    partial = "partials/audit_rows.html" if query.before_id is not None else "partials/audit_results.html"
    response = render(request, "audit.html", partial, **_page_context(session, query))
    if query.errors:
        response.status_code = status.HTTP_400_BAD_REQUEST
    return response


def _export_name(extension: str) -> str:
    return f"audit-log-{utcnow():%Y%m%d-%H%M%S}.{extension}"


def _export(request: Request, extension: str, media_type: str) -> Response:
    query = parse_audit_page_query(request.query_params)
    if query.errors:
        return PlainTextResponse("\n".join(query.errors) + "\n", status_code=status.HTTP_400_BAD_REQUEST)
    body = (csv_export if extension == "csv" else jsonl_export)(query.filters)
    disposition = f'attachment; filename="{_export_name(extension)}"'
    return StreamingResponse(body, media_type=media_type, headers={"Content-Disposition": disposition})


@router.get("/export.csv")
def export_csv(request: Request) -> Response:
    """Every row matching the page's filters, newest first, streamed in batches."""
    return _export(request, "csv", "text/csv; charset=utf-8")


@router.get("/export.jsonl")
def export_jsonl(request: Request) -> Response:
    return _export(request, "jsonl", "application/x-ndjson")


@router.get("/events")
async def audit_events(request: Request, session: SessionDep) -> Response:
    """Server-sent events: rendered rows matching the filters, recorded after `after_id`.

    A reconnecting EventSource sends Last-Event-ID (the last row it got), which wins.
    """
    query = parse_audit_page_query(request.query_params)
    if query.errors:
        return PlainTextResponse("\n".join(query.errors) + "\n", status_code=status.HTTP_400_BAD_REQUEST)
    if audit_service.listener_count >= MAX_LIVE_TAILS:
        return PlainTextResponse(
            f"{MAX_LIVE_TAILS} live tails are open already; close one (uncheck Live) and retry.\n",
            status_code=status.HTTP_503_SERVICE_UNAVAILABLE,
            headers={"Retry-After": "30"},
        )
    last_event = request.headers.get("last-event-id", "")
    if last_event.isdigit():
        after_id = int(last_event)
    elif query.after_id is not None:
        after_id = query.after_id
    else:
        after_id = await run_in_threadpool(latest_id, session)
    session.close()  # the tail may last hours: it reads with short sessions of its own
    return EventSourceResponse(
        live_tail(query.filters, after_id, _table_rows), ping=15, headers={"Cache-Control": "no-cache"}
    )


def _table_rows(rows: list[AuditLog], ended: list[AuditLog]) -> str:
    """New rows newest first, as the page's table draws them, and rows that have ended since
    they were drawn in flight, each to replace its old self (an htmx out-of-band swap)."""
    template = templates.get_template("partials/audit_row.html")
    new = [template.render(row=row) for row in sorted(rows, key=lambda r: r.id or 0, reverse=True)]
    return "".join(new + [template.render(row=row, oob=True) for row in ended])


@router.post("/retention", response_class=HTMLResponse)
def update_retention(
    request: Request,
    session: SessionDep,
    days: Annotated[str, Form()] = "",
    reset: Annotated[str, Form()] = "",
) -> Response:
    """Override MLX_SERVER_AUDIT_RETENTION_DAYS (or drop the override); prunes right away."""
    error = None
    if reset:
        set_audit_retention(session, None)
    elif days.strip().isdigit() and 1 <= int(days) <= MAX_RETENTION_DAYS:
        set_audit_retention(session, int(days))
    else:
        error = f'Keep audit rows for a whole number of days from 1 to {MAX_RETENTION_DAYS}, not "{days}".'
    pruned = 0 if error else audit_service.prune_expired()
    if error is None and not wants_fragment(request):  # a plain form: post/redirect/get
        return RedirectResponse("/audit#retention", status_code=status.HTTP_303_SEE_OTHER)
    response = render(
        request,
        "audit.html",
        "partials/audit_retention.html",
        retention_error=error,
        retention_input=days,
        pruned=pruned,
        saved=error is None,
        **_page_context(session, parse_audit_page_query({})),
    )
    if error:
        response.status_code = status.HTTP_400_BAD_REQUEST
    return response


@router.get("/{audit_id:int}", response_class=HTMLResponse)
def audit_entry(request: Request, session: SessionDep, audit_id: RowId) -> HTMLResponse:
    """One request in full; htmx gets a table row to show under the list's row."""
    row = session.get(AuditLog, audit_id)
    response = render(
        request, "audit_detail.html", "partials/audit_detail_row.html", row=row, audit_id=audit_id
    )
    if row is None:
        response.status_code = status.HTTP_404_NOT_FOUND
    return response
