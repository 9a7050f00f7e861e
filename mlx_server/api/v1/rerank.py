"""POST /v1/rerank (also /rerank: api/path_aliases.py): a query's documents ranked, best first
(thin: services/pipeline/rerank.py)."""

from __future__ import annotations

import uuid

from fastapi import APIRouter, Request

from mlx_server.api.audit_middleware import audit_details
from mlx_server.errors import APIError
from mlx_server.schemas.rerank import (
    RerankDocument,
    RerankMeta,
    RerankRequest,
    RerankResponse,
    RerankResult,
    RerankUsage,
)
from mlx_server.services.pipeline.catalog import resolve_model
from mlx_server.services.pipeline.rerank import rerank

router = APIRouter(tags=["rerank"])


def document_texts(documents: list[str | dict[str, object]]) -> list[str]:
    """Each document's text: a string, or an object's "text" (else a 400 naming it)."""
    texts = []
    for index, document in enumerate(documents):
        text = document if isinstance(document, str) else document.get("text")
        if not isinstance(text, str):
            raise APIError(
                400, 'A document is a string or an object with a "text" string.', param=f"documents[{index}]"
            )
        texts.append(text)
    return texts


@router.post("/rerank", response_model_exclude_none=True)
async def rerank_documents(body: RerankRequest, request: Request) -> RerankResponse:
    details = audit_details(request)
    model = details.model = resolve_model(body.model)
    details.protocol, details.stream = "rerank", False
    details.parameters = body.model_dump(include={"top_n", "return_documents"}, exclude_unset=True)
    details.parameters["document_count"] = len(body.documents)
    texts = document_texts(body.documents)
    ranking = await rerank(model, body.query, texts)
    details.prompt_tokens = ranking.prompt_tokens
    order = sorted(range(len(texts)), key=lambda i: ranking.scores[i], reverse=True)[: body.top_n]
    results = [
        RerankResult(
            index=i,
            relevance_score=ranking.scores[i],
            document=RerankDocument(text=texts[i]) if body.return_documents else None,
        )
        for i in order
    ]
    return RerankResponse(
        id=str(uuid.uuid4()),
        model=model,
        results=results,
        usage=RerankUsage(prompt_tokens=ranking.prompt_tokens, total_tokens=ranking.prompt_tokens),
        meta=RerankMeta(method=ranking.method, billed_units={"search_units": 1}),
    )
