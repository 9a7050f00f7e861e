"""POST /v1/embeddings: validate, embed through the pool, format as OpenAI does."""

from __future__ import annotations

from fastapi import APIRouter, Request

from mlx_server.api.audit_middleware import audit_details
from mlx_server.schemas.embeddings import Embedding, EmbeddingRequest, EmbeddingResponse, EmbeddingUsage
from mlx_server.services.pipeline.catalog import resolve_model
from mlx_server.services.pipeline.embeddings import create_embeddings, encode_vector, input_list

router = APIRouter(tags=["embeddings"])


@router.post("/embeddings")
async def create_embedding(body: EmbeddingRequest, request: Request) -> EmbeddingResponse:
    model = resolve_model(body.model)
    details = audit_details(request)
    details.model, details.protocol, details.stream = model, "openai", False
    items = input_list(body.input)
    details.parameters = body.model_dump(
        include={"encoding_format", "dimensions", "truncate"}, exclude_unset=True
    )
    details.parameters["input_count"] = len(items)
    result = await create_embeddings(model, items, dimensions=body.dimensions, truncate=body.truncate)
    details.prompt_tokens = result.prompt_tokens
    return EmbeddingResponse(
        data=[
            Embedding(index=i, embedding=encode_vector(vector, body.encoding_format))
            for i, vector in enumerate(result.vectors)
        ],
        model=model,
        usage=EmbeddingUsage(prompt_tokens=result.prompt_tokens, total_tokens=result.prompt_tokens),
    )
