"""POST /v1/tokenize and /v1/detokenize (also /tokenize and /detokenize at the root, where vLLM
serves them: api/path_aliases.py), in vLLM's shape, with the model's real chat template and
tokenizer (thin: services/pipeline/tokenize.py)."""

from __future__ import annotations

from fastapi import APIRouter, Request

from mlx_server.api.audit_middleware import audit_details
from mlx_server.errors import APIError
from mlx_server.schemas.tokenize import (
    DetokenizeRequest,
    DetokenizeResponse,
    TokenizeRequest,
    TokenizeResponse,
)
from mlx_server.services.pipeline.catalog import resolve_model
from mlx_server.services.pipeline.protocols.openai_request import chat_messages, chat_tools
from mlx_server.services.pipeline.request import GenerationRequest
from mlx_server.services.pipeline.tokenize import detokenize, tokenize_chat, tokenize_text

router = APIRouter(tags=["tokenize"])


@router.post("/tokenize")
async def tokenize(body: TokenizeRequest, request: Request) -> TokenizeResponse:
    details = audit_details(request)
    model = details.model = resolve_model(body.model)
    details.protocol, details.stream = "openai", False
    if (body.prompt is None) == (body.messages is None):
        raise APIError(
            400, "Send either prompt (text) or messages (a chat), not both or neither.", param="prompt"
        )
    if body.prompt is not None:
        tokens = await tokenize_text(
            model, body.prompt, add_special_tokens=body.add_special_tokens, pieces=body.return_token_strs
        )
    else:
        chat = GenerationRequest(
            model=model,
            messages=chat_messages(body.messages or []),
            tools=chat_tools(body.tools),
            enable_thinking=body.thinking_toggle,
        )
        tokens = await tokenize_chat(
            chat,
            add_generation_prompt=body.add_generation_prompt,
            add_special_tokens=body.add_special_tokens,
            pieces=body.return_token_strs,
        )
    details.prompt_tokens = len(tokens.ids)
    return TokenizeResponse(
        count=len(tokens.ids),
        max_model_len=tokens.context_length,
        tokens=tokens.ids,
        token_strs=tokens.pieces,
    )


@router.post("/detokenize")
async def detokenize_tokens(body: DetokenizeRequest, request: Request) -> DetokenizeResponse:
    details = audit_details(request)
    model = details.model = resolve_model(body.model)
    details.protocol, details.stream = "openai", False
    return DetokenizeResponse(prompt=await detokenize(model, body.tokens))
