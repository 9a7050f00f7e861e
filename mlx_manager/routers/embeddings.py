"""Embeddings panel: paste texts, pick an embedding model, see their similarity matrix."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Form, Request
from fastapi.responses import HTMLResponse

from mlx_manager.deps import SessionDep
from mlx_manager.services.embeddings_panel import (
    EXAMPLE_TEXTS,
    Similarities,
    embedding_models,
    similarities,
    split_texts,
)
from mlx_manager.services.forms import FormError
from mlx_manager.web.templating import render
from mlx_server.facade import APIError

router = APIRouter(prefix="/embeddings")


def _page(
    request: Request,
    session: SessionDep,
    *,
    model: str | None,
    texts: str,
    result: Similarities | None = None,
    error: str | None = None,
) -> HTMLResponse:
    models = embedding_models(session)
    return render(
        request,
        "embeddings.html",
        "partials/embeddings_result.html",
        models=models,
        model=model if model in models else (models[0] if models else None),
        texts=texts,
        result=result,
        error=error,
        status_code=400 if error else 200,
    )


@router.get("", response_class=HTMLResponse)
def embeddings_page(request: Request, session: SessionDep, model: str | None = None) -> HTMLResponse:
    return _page(request, session, model=model, texts="\n".join(EXAMPLE_TEXTS))


@router.post("", response_class=HTMLResponse)
async def compare(
    request: Request, session: SessionDep, model: Annotated[str, Form()], texts: Annotated[str, Form()]
) -> HTMLResponse:
    try:
        result = await similarities(model, split_texts(texts))
    except (FormError, APIError) as exc:
        message = exc.message if isinstance(exc, APIError) else str(exc)
        return _page(request, session, model=model, texts=texts, error=message)
    return _page(request, session, model=model, texts=texts, result=result)
