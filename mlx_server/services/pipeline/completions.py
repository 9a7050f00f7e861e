"""Legacy text completions (/v1/completions): the prompt as given, no chat template."""

from __future__ import annotations

from collections.abc import AsyncGenerator
from dataclasses import replace

from mlx_server.errors import APIError
from mlx_server.models.loaders import LoadedModel
from mlx_server.services.operations.generation_defaults import default_max_tokens
from mlx_server.services.operations.model_defaults import current_defaults
from mlx_server.services.pipeline.engine.generation import generate_text
from mlx_server.services.pipeline.engine.params import CompletionStats, GeneratedText
from mlx_server.services.pipeline.events import Finish, GenerationEvent, TextDelta
from mlx_server.services.pipeline.inference import (
    EventStream,
    check_sampling,
    encode,
    max_tokens_for,
    open_model,
)
from mlx_server.services.pipeline.model_defaults import with_model_defaults
from mlx_server.services.pipeline.request import GenerationRequest


async def generate_completion(
    request: GenerationRequest, stats: CompletionStats | None = None
) -> EventStream:
    """The continuation of `request.prompt` as events: the echoed prompt first when asked, then
    the generated text, finish and usage."""
    assert request.prompt is not None, "a completion request"
    stats = stats if stats is not None else CompletionStats()
    prompt = request.prompt
    loaded, release = await open_model(request.model)
    try:
        params = replace(with_model_defaults(request, current_defaults(loaded)).params, continuation=True)
        tokens = encode(loaded, prompt) if isinstance(prompt, str) else prompt
        if not tokens:
            raise APIError(400, "The prompt is empty.", param="prompt")
        _check_token_ids(loaded, tokens)
        tokens = _fitting(loaded, tokens, params.max_tokens)
        max_tokens = max_tokens_for(loaded, len(tokens), params.max_tokens, "prompt")
        check_sampling(loaded, params)
        echoed = (
            (prompt if isinstance(prompt, str) else loaded.tokenizer.decode(tokens)) if request.echo else ""
        )
    except BaseException:
        release()
        raise
    pieces = generate_text(loaded, tokens, params, max_tokens, stats)
    return EventStream(_completion_events(pieces, echoed, stats), release)


def _fitting(loaded: LoadedModel, tokens: list[int], requested: int | None) -> list[int]:
    """A model set to truncate keeps the end of a prompt too long for its context, with room for
    the reply (max_tokens, at most half the context)."""
    context = loaded.context_length
    if not loaded.defaults.truncates or context is None:
        return tokens
    keep = context - min(requested or default_max_tokens(), context // 2)
    return tokens[-keep:] if len(tokens) > keep else tokens


def _check_token_ids(loaded: LoadedModel, tokens: list[int]) -> None:
    vocab = loaded.chat.vocabulary_size
    if any(not 0 <= t < vocab for t in tokens):
        raise APIError(
            400, f"The prompt has token ids outside the vocabulary (0..{vocab - 1}).", param="prompt"
        )


async def _completion_events(
    pieces: AsyncGenerator[GeneratedText, None], echoed: str, stats: CompletionStats
) -> AsyncGenerator[GenerationEvent, None]:
    if echoed:
        yield TextDelta(echoed)
    reason = None
    try:
        async for piece in pieces:
            if piece.text or piece.logprobs:
                yield TextDelta(piece.text, tuple(piece.logprobs))
            reason = piece.finish_reason or reason
    finally:
        await pieces.aclose()
    yield Finish(reason or "stop", stats.stop_sequence)
    yield stats.usage()
