"""POST /v1/responses and the stored responses (GET, DELETE, input_items): OpenAI's Responses
API on the same pipeline as chat completions. Errors are OpenAI's shape (its SDKs read the
Responses API's errors from the same `error` object)."""

from __future__ import annotations

import asyncio
from typing import Annotated, Literal

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import JSONResponse, Response

from mlx_server.api.audit_middleware import audit_details, audit_parameters
from mlx_server.api.openai_common import finished, streamed
from mlx_server.database import SessionDep
from mlx_server.schemas.responses import ResponseRequest
from mlx_server.services.operations.responses_store import delete_response, input_items_page, stored_response
from mlx_server.services.pipeline.catalog import resolve_model
from mlx_server.services.pipeline.engine.params import CompletionStats
from mlx_server.services.pipeline.protocols.responses_service import create_response


def _responses_protocol(request: Request) -> None:
    """Marks the audit row before the body is validated, so a rejected request is marked too."""
    audit_details(request).protocol = "responses"


router = APIRouter(tags=["responses"], dependencies=[Depends(_responses_protocol)])


@router.post("/responses", response_model=None)
async def create(body: ResponseRequest, request: Request) -> Response:
    model = resolve_model(body.model)
    details = audit_details(request)
    details.model, details.stream = model, body.stream
    details.parameters = {
        **audit_parameters(body),
        **body.model_dump(include={"max_output_tokens", "store", "reasoning"}, exclude_unset=True),
    }
    stats = CompletionStats()
    result = await create_response(body, model, stats)
    if isinstance(result, dict):
        return finished(result, details, stats)
    return streamed(result, details, stats)


@router.get("/responses/{response_id}")
async def retrieve(session: SessionDep, response_id: str) -> JSONResponse:
    record = await asyncio.to_thread(stored_response, session, response_id)
    return JSONResponse(record.body)


@router.delete("/responses/{response_id}")
async def delete(session: SessionDep, response_id: str) -> JSONResponse:
    return JSONResponse(await asyncio.to_thread(delete_response, session, response_id))


@router.get("/responses/{response_id}/input_items")
async def input_items(
    session: SessionDep,
    response_id: str,
    limit: Annotated[int, Query(ge=1, le=100)] = 20,
    order: Literal["asc", "desc"] = "desc",
    after: str | None = None,
) -> JSONResponse:
    page = await asyncio.to_thread(
        input_items_page, session, response_id, limit=limit, order=order, after=after
    )
    return JSONResponse(page)
