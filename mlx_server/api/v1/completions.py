"""POST /v1/completions (legacy text completions): the prompt as given, no chat template."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import Response

from mlx_server.api.openai_common import audit_start, finished, reject_n, streamed
from mlx_server.errors import APIError
from mlx_server.schemas.openai import CompletionRequest
from mlx_server.services.pipeline.completions import generate_completion
from mlx_server.services.pipeline.engine.params import CompletionStats, GenerationParams
from mlx_server.services.pipeline.protocols import openai_render
from mlx_server.services.pipeline.protocols.openai_request import left_out, sampling_params
from mlx_server.services.pipeline.request import GenerationRequest

router = APIRouter(tags=["completions"])


def _single_prompt(body: CompletionRequest) -> str | list[int]:
    prompt = body.prompt
    if isinstance(prompt, str):
        return prompt
    if prompt and all(isinstance(t, int) for t in prompt):
        return [int(t) for t in prompt]  # type: ignore[arg-type]  # checked: a list of token ids
    if len(prompt) == 1:
        return prompt[0]  # type: ignore[return-value]  # one string or one token list
    raise APIError(400, "Send one prompt per request (a string or a list of token ids).", param="prompt")


@router.post("/completions", response_model=None)
async def create_completion(body: CompletionRequest, request: Request) -> Response:
    model, details = audit_start(request, body)
    reject_n(body)
    if body.suffix:
        raise APIError(400, "suffix (fill-in-the-middle) is not supported.", param="suffix")
    if body.best_of not in (None, 1):
        raise APIError(400, "Only best_of=1 is supported.", param="best_of")
    stats = CompletionStats()
    params = GenerationParams(
        max_tokens=body.max_tokens,
        stop=body.stop_list,
        sampling=sampling_params(body),
        top_logprobs=body.logprobs,
        prompt_lookup=body.prompt_lookup,
        defaultable=left_out(body),
    )
    prompt = _single_prompt(body)
    events = await generate_completion(
        GenerationRequest(model=model, params=params, prompt=prompt, echo=body.echo), stats
    )
    logprobs = body.logprobs is not None
    if body.stream:
        chunks = openai_render.text_chunks(events, model, include_usage=body.include_usage, logprobs=logprobs)
        return streamed(chunks, details, stats)
    reply = await events.collect()
    return finished(openai_render.text_completion(model, reply, logprobs=logprobs), details, stats)
