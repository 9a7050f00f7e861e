"""Text and chats to the model's token ids and back (POST /tokenize, /detokenize).

Chats go through `chat_prompt_tokens()`, the very function generation renders its prompt
with, so `count` equals `usage.prompt_tokens` and Anthropic's count_tokens for the same
messages; a plain prompt goes through the tokenizer as a completion would encode it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from mlx_server.errors import APIError
from mlx_server.models.loaders import LoadedModel
from mlx_server.services.pipeline.inference import chat_prompt_tokens, encode, open_model
from mlx_server.services.pipeline.request import GenerationRequest

T = TypeVar("T")


@dataclass(frozen=True)
class Tokens:
    ids: list[int]
    context_length: int | None
    pieces: list[str] | None = None


async def _with_model(model: str, use: Callable[[LoadedModel], T]) -> T:
    loaded, release = await open_model(model)
    try:
        return use(loaded)
    finally:
        release()


def _pieces(loaded: LoadedModel, ids: list[int]) -> list[str]:
    return [str(piece) for piece in loaded.tokenizer.convert_ids_to_tokens(ids)]


async def tokenize_chat(
    request: GenerationRequest,
    *,
    add_generation_prompt: bool,
    add_special_tokens: bool | None,
    pieces: bool = False,
) -> Tokens:
    """The chat's prompt tokens; `add_special_tokens` true puts the BOS token before what the
    template wrote (vLLM's meaning), unless it is there already."""
    ids, context = await chat_prompt_tokens(request, add_generation_prompt=add_generation_prompt)
    if not add_special_tokens and not pieces:
        return Tokens(ids, context)

    def finish(loaded: LoadedModel) -> Tokens:
        bos = getattr(loaded.tokenizer, "bos_token_id", None)
        full = [bos, *ids] if add_special_tokens and bos is not None and ids[:1] != [bos] else ids
        return Tokens(full, context, _pieces(loaded, full) if pieces else None)

    return await _with_model(request.model, finish)


async def tokenize_text(
    model: str, text: str, *, add_special_tokens: bool | None, pieces: bool = False
) -> Tokens:
    """`text`'s ids as a completion of it would see them (unless add_special_tokens says otherwise)."""

    def run(loaded: LoadedModel) -> Tokens:
        if add_special_tokens is None:
            ids = encode(loaded, text)
        else:
            ids = list(loaded.tokenizer.encode(text, add_special_tokens=add_special_tokens))
        return Tokens(ids, loaded.context_length, _pieces(loaded, ids) if pieces else None)

    return await _with_model(model, run)


async def detokenize(model: str, ids: list[int]) -> str:
    """The text of `ids`; an id outside the vocabulary is a 400 naming it."""

    def run(loaded: LoadedModel) -> str:
        vocabulary = loaded.chat.vocabulary_size
        bad = next((i for i, token in enumerate(ids) if not 0 <= token < vocabulary), None)
        if bad is not None:
            raise APIError(
                400,
                f"tokens[{bad}] = {ids[bad]} is not a token id of {model!r} (0..{vocabulary - 1}).",
                param=f"tokens[{bad}]",
            )
        return str(loaded.tokenizer.decode(ids))

    return await _with_model(model, run)
