"""A model's defaults applied to a request (models/defaults.py): what the client left out.

Sampling fields the protocol marked as left out (`GenerationParams.defaultable`), max_tokens when
none was asked for, stop strings when the request sends none, the system prompt when the
conversation has none, and thinking when the request does not switch it. Remote backends never
see them (routing happens before).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from mlx_server.models.defaults import ModelDefaults
from mlx_server.services.pipeline.request import GenerationRequest, Message

# SamplingParams fields a model's defaults may set.
DEFAULTABLE_SAMPLING = frozenset({"temperature", "top_p", "top_k", "min_p", "repetition_penalty"})
SYSTEM_ROLES = ("system", "developer")


def with_model_defaults(request: GenerationRequest, defaults: ModelDefaults) -> GenerationRequest:
    """`request` with the model's defaults where it set nothing (itself when nothing applies)."""
    params = request.params
    sampling = {
        name: value
        for name in params.defaultable & DEFAULTABLE_SAMPLING
        if (value := getattr(defaults, name)) is not None
    }
    changes: dict[str, Any] = {}
    stop = params.stop or list(defaults.stop or ())
    lookup = params.prompt_lookup if params.prompt_lookup is not None else defaults.prompt_lookup
    if (
        sampling
        or (params.max_tokens is None and defaults.max_tokens is not None)
        or stop != params.stop
        or lookup != params.prompt_lookup
    ):
        changes["params"] = replace(
            params,
            sampling=replace(params.sampling, **sampling),
            max_tokens=params.max_tokens if params.max_tokens is not None else defaults.max_tokens,
            stop=stop,
            prompt_lookup=lookup,
        )
    messages = request.messages
    if messages is not None and defaults.system_prompt and not _has_system(messages):
        changes["messages"] = (Message("system", defaults.system_prompt), *messages)
    if messages is not None and request.enable_thinking is None and defaults.thinking is not None:
        changes["enable_thinking"] = defaults.thinking
    return replace(request, **changes) if changes else request


def _has_system(messages: tuple[Message, ...]) -> bool:
    return any(message.role in SYSTEM_ROLES for message in messages)


def without_oldest_turn(messages: tuple[Message, ...]) -> tuple[Message, ...] | None:
    """The conversation without its oldest message that is not a system prompt (and the tool
    results that answered it); None when only the last message is left to keep."""
    others = [i for i, message in enumerate(messages) if message.role not in SYSTEM_ROLES]
    if len(others) <= 1:
        return None
    dropped = {others[0]}
    for index in others[1:-1]:  # results left without their call would confuse the template
        if messages[index].role != "tool":
            break
        dropped.add(index)
    return tuple(message for i, message in enumerate(messages) if i not in dropped)
