"""What the OpenAI routes (chat completions, legacy completions) share: n=1, the audit row's
start, and the response, whole or streamed."""

from __future__ import annotations

from collections.abc import AsyncIterable, Mapping
from typing import Any

from fastapi import Request
from fastapi.responses import JSONResponse, Response

from mlx_server.api.audit_middleware import AuditDetails, audit_details, audit_parameters, audit_stats
from mlx_server.api.sse import openai_event_stream
from mlx_server.errors import APIError
from mlx_server.schemas.openai import SamplingFields
from mlx_server.services.pipeline.catalog import resolve_model
from mlx_server.services.pipeline.engine.params import CompletionStats


def audit_start(request: Request, body: SamplingFields) -> tuple[str, AuditDetails]:
    """The local model the request names (aliases resolved), and its audit row's details."""
    model = resolve_model(body.model)
    details = audit_details(request)
    details.model, details.protocol, details.stream = model, "openai", body.stream
    details.parameters = audit_parameters(body)
    return model, details


def finished(body: Mapping[str, Any], details: AuditDetails, stats: CompletionStats) -> Response:
    audit_stats(details, stats)
    return JSONResponse(body)


def streamed(
    chunks: AsyncIterable[Mapping[str, Any]], details: AuditDetails, stats: CompletionStats
) -> Response:
    """OpenAI-style server-sent events, the audit row following the stream as it goes."""

    def failed(message: str) -> None:
        details.error = message

    return openai_event_stream(chunks, on_progress=lambda: audit_stats(details, stats), on_error=failed)


def reject_n(body: SamplingFields) -> None:
    if body.n != 1:
        raise APIError(400, "Only n=1 is supported; send separate requests for more choices.", param="n")
