"""The single inference pipeline (blueprint §4.1, §10.4): every protocol ends up here.

`generate_chat_completion()` takes one typed `GenerationRequest` and returns an `EventStream`
of the typed events in `services/events.py`; each protocol renders them (OpenAI, Anthropic,
the playground). Everything that can fail on the request (unknown model, overload, a template
that rejects the messages, a prompt longer than the context, a bad grammar) fails before the
stream is returned, so clients get a proper status code.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncGenerator, Callable
from contextlib import aclosing
from dataclasses import replace

from mlx_server.errors import APIError
from mlx_server.models.adapters import ChatTemplateError
from mlx_server.models.detection import ModelType
from mlx_server.models.loaders import LoadedModel
from mlx_server.models.pool import get_model_pool
from mlx_server.observability import GenerationSpan, traced_pipeline
from mlx_server.services.leased_stream import LeasedStream
from mlx_server.services.operations.generation_defaults import default_max_tokens
from mlx_server.services.operations.model_defaults import current_defaults
from mlx_server.services.pipeline.chat_turn import ChatTurn
from mlx_server.services.pipeline.engine.constraints import (
    GrammarProcessor,
    build_matcher,
    lark_grammar,
    special_tokens_of,
    specialize,
)
from mlx_server.services.pipeline.engine.generation import admission, generate_text
from mlx_server.services.pipeline.engine.params import CompletionStats, GeneratedText, GenerationParams
from mlx_server.services.pipeline.engine.vision import VisionInputs, request_images, vision_inputs
from mlx_server.services.pipeline.events import Finish, FinishReason, GenerationEvent, Reply
from mlx_server.services.pipeline.model_defaults import with_model_defaults, without_oldest_turn
from mlx_server.services.pipeline.request import GenerationRequest, Tool, ToolChoice
from mlx_server.services.remote.routing import LocalTarget, RemoteReply, route_chat

logger = logging.getLogger("mlx_server.inference")

CONSTRAINED_REPETITION_PENALTY = 1.1


class EventStream(LeasedStream[GenerationEvent]):
    """The events of one generation; holds its model lease and admission slot until it ends."""

    async def collect(self) -> Reply:
        """The whole reply (a non-streamed response)."""
        async with aclosing(self._iterate()) as events:
            return await Reply.collect(events)


async def open_model(
    model_id: str, types: tuple[ModelType, ...] = (ModelType.TEXT_GEN, ModelType.VISION)
) -> tuple[LoadedModel, Callable[[], None]]:
    """Admit the request and lease its model (one of `types`: a text or vision model unless told);
    the callable gives both back."""
    admission.acquire()
    pool = get_model_pool()
    try:
        loaded = await pool.acquire(model_id, types)
    except BaseException:
        admission.release()
        raise

    def release() -> None:
        pool.release(loaded)
        admission.release()

    return loaded, release


def encode(loaded: LoadedModel, text: str) -> list[int]:
    tokenizer = loaded.tokenizer
    bos = getattr(tokenizer, "bos_token", None)
    # A chat template usually writes the BOS token itself; never add a second one.
    add_special = bos is None or not text.startswith(bos)
    return list(tokenizer.encode(text, add_special_tokens=add_special))


def _chat_prompt(
    loaded: LoadedModel,
    request: GenerationRequest,
    tools: tuple[Tool, ...] | None,
    add_generation_prompt: bool = True,
) -> tuple[str, list[int]]:
    """The prompt text through the model's chat template, and its tokens. The template edge:
    messages and tools become the OpenAI-format dicts templates read here, and only here."""
    assert request.messages is not None, "a chat request"
    adapter = loaded.chat
    instruction = _tool_choice_instruction(request.tool_choice) if tools else None
    shown = [tool.as_openai() for tool in tools or ()] or None
    try:
        # Content is plain text (or text and image markers) from here on.
        converted = adapter.convert_messages([message.as_openai() for message in request.messages])
        if shown and not adapter.supports_native_tools():
            converted = adapter.add_system_text(converted, adapter.format_tools_for_prompt(shown))
            shown = None
        if instruction is not None:
            converted = adapter.add_system_text(converted, instruction)
        text = adapter.apply_chat_template(
            converted,
            tools=shown,
            enable_thinking=request.enable_thinking,
            add_generation_prompt=add_generation_prompt,
        )
    except ChatTemplateError as exc:
        raise APIError(400, str(exc), param="messages") from exc
    logger.debug("prompt for %s:\n%s", loaded.model_id, text)
    return text, encode(loaded, text)


async def _prompt(
    loaded: LoadedModel,
    request: GenerationRequest,
    tools: tuple[Tool, ...] | None,
    add_generation_prompt: bool = True,
) -> tuple[str, list[int], VisionInputs | None]:
    """The prompt text and tokens; for a vision model also its images, processed with the
    prompt (its tokens then count each image's tokens)."""
    images = await request_images(loaded, request.images)
    text, tokens = _chat_prompt(loaded, request, tools, add_generation_prompt)
    if loaded.model_type is not ModelType.VISION:
        return text, tokens, None
    vision = await vision_inputs(loaded, text, images)
    return text, vision.input_ids, vision


async def _fitting_prompt(
    loaded: LoadedModel, request: GenerationRequest, tools: tuple[Tool, ...] | None
) -> tuple[str, list[int], VisionInputs | None]:
    """The prompt; a model set to truncate (its context_overflow default) drops the oldest
    messages until the prompt leaves room for the reply: max_tokens, at most half the context."""
    text, tokens, vision = await _prompt(loaded, request, tools)
    context = loaded.context_length
    if not loaded.defaults.truncates or context is None or request.messages is None:
        return text, tokens, vision
    reserve = min(request.params.max_tokens or default_max_tokens(), context // 2)
    messages = request.messages
    while len(tokens) + reserve > context and (shorter := without_oldest_turn(messages)) is not None:
        messages = shorter
        text, tokens, vision = await _prompt(loaded, replace(request, messages=messages), tools)
    return text, tokens, vision


def max_tokens_for(
    loaded: LoadedModel,
    prompt_tokens: int,
    requested: int | None,
    prompt_param: str,
    *,
    ceiling: bool = False,
) -> int:
    """The requested budget, checked against the context; without one, what fits (capped).
    A `ceiling` is lowered to the room left instead of rejected."""
    default = default_max_tokens()  # the dashboard's override, else MLX_SERVER_DEFAULT_MAX_TOKENS
    context = loaded.context_length
    if context is None:
        return requested or default
    room = context - prompt_tokens
    limit = " (its context_length default)" if loaded.defaults.context_length else ""
    if room <= 0:
        raise APIError(
            400,
            f"The prompt is {prompt_tokens} tokens, but {loaded.model_id!r} has a context of {context} "
            f"tokens{limit}; shorten the prompt.",
            param=prompt_param,
            code="context_length_exceeded",
        )
    if requested is None:
        return min(default, room)
    if ceiling:
        return min(requested, room)
    if requested > room:
        raise APIError(
            400,
            f"The prompt ({prompt_tokens} tokens) plus max_tokens ({requested}) exceeds the context of "
            f"{context} tokens{limit}; set max_tokens to at most {room}.",
            param="max_tokens",
            code="context_length_exceeded",
        )
    return requested


def check_sampling(loaded: LoadedModel, params: GenerationParams) -> None:
    """What only the model can bound: logit_bias token ids and top_k, within its vocabulary."""
    vocab = loaded.chat.vocabulary_size
    bad = [t for t in params.sampling.logit_bias or {} if not 0 <= t < vocab]
    if bad:
        raise APIError(
            400,
            f"logit_bias names token ids outside the vocabulary (0..{vocab - 1}): {bad[:5]}",
            param="logit_bias",
        )
    if params.sampling.top_k > vocab:
        raise APIError(
            400,
            f"top_k is {params.sampling.top_k}, but {loaded.model_id!r} has a vocabulary of {vocab} "
            f"tokens; use at most {vocab} (or 0 for no top-k filter).",
            param="top_k",
        )


def _tool_choice_instruction(tool_choice: ToolChoice) -> str | None:
    """Without constrained decoding, a required call is asked for in words; the reply is checked."""
    if tool_choice.function is not None:
        return f"You must answer by calling the function {tool_choice.function!r}."
    if tool_choice.requires_call:
        return "You must answer by calling one or more of the tools."
    return None


def _request_tools(tools: tuple[Tool, ...] | None, tool_choice: ToolChoice) -> tuple[Tool, ...] | None:
    """The tools the model is shown: none for tool_choice "none", only the named one when forced."""
    if not tools or not tool_choice.offers_tools:
        return None
    name = tool_choice.function
    if name is None:
        return tools
    named = tuple(tool for tool in tools if tool.name == name)
    if not named:
        raise APIError(400, f"tool_choice names {name!r}, which is not among the tools.", param="tool_choice")
    return named


@traced_pipeline  # a span when tracing is configured (observability.py)
async def generate_chat_completion(
    request: GenerationRequest, stats: CompletionStats | None = None
) -> EventStream:
    """A chat reply as events (content, reasoning, checked tool calls, finish, usage); `stats`
    (if given) is filled as it runs.

    One StreamingProcessor splits the reply, streamed or not. A required or named tool call is
    constrained to the model's own call format with schema-valid arguments (when its parser
    provides a grammar), and `output_format` constrains the reply to JSON (schema).
    """
    stats = stats if stats is not None else CompletionStats()
    routed = await route_chat(request, stats)  # rules, remote backends
    if isinstance(routed, RemoteReply):
        return EventStream(routed.events, routed.release)
    if isinstance(routed, LocalTarget):
        request = replace(request, model=routed.model)
    return await _local_chat_completion(request, stats)


async def _local_chat_completion(request: GenerationRequest, stats: CompletionStats) -> EventStream:
    shown_tools = _request_tools(request.tools, request.tool_choice)
    loaded, release = await open_model(request.model)
    try:
        request = with_model_defaults(request, current_defaults(loaded))
        prompt_text, prompt, vision = await _fitting_prompt(loaded, request, shown_tools)
        max_tokens = max_tokens_for(
            loaded,
            len(prompt),
            request.params.max_tokens,
            "messages",
            ceiling=request.params.max_tokens_is_ceiling,
        )
        stats.prompt_tokens = len(prompt)  # known before the first event (Anthropic's message_start)
        check_sampling(loaded, request.params)
        constraint, constrained_calls = await _constraint(loaded, request, shown_tools, max_tokens)
    except BaseException:
        release()
        raise
    turn = ChatTurn(
        loaded.chat,
        prompt=prompt_text,
        tools=shown_tools,
        tool_choice=request.tool_choice,
        output_format=request.output_format,
        constrained_calls=constrained_calls,
        rejected_calls_as_content=request.rejected_calls_as_content,
    )
    params = _under_grammar(request.params) if constraint is not None else request.params
    pieces = generate_text(loaded, prompt, params, max_tokens, stats, constraint, vision)
    span = GenerationSpan(loaded.model_id)

    def end_and_release() -> None:  # the stream's release: runs exactly once
        span.end(stats.trace_figures())
        release()

    return EventStream(_chat_events(pieces, turn, stats), end_and_release)


async def _chat_events(
    pieces: AsyncGenerator[GeneratedText, None], turn: ChatTurn, stats: CompletionStats
) -> AsyncGenerator[GenerationEvent, None]:
    reason: FinishReason | None = None
    try:
        async for piece in pieces:
            for event in turn.feed(piece.text, piece.logprobs):
                stats.note(event)
                yield event
            reason = piece.finish_reason or reason
            if turn.done:
                break
    finally:
        await pieces.aclose()
    for event in turn.finish(reason):
        stats.note(event)
        yield event
    finish = turn.finish_reason(reason)
    yield Finish(finish, stats.stop_sequence if finish == "stop" else None)
    yield stats.usage()


def _under_grammar(params: GenerationParams) -> GenerationParams:
    """Inside a grammar a small model's greedy loops ("1000000…", a phrase again and again in an
    unbounded string) run to max_tokens and leave invalid JSON; a mild repetition penalty, as
    llama.cpp and LM Studio apply by default, breaks them. A request's own value wins."""
    if params.sampling.repetition_penalty is not None:
        return params
    return replace(
        params, sampling=replace(params.sampling, repetition_penalty=CONSTRAINED_REPETITION_PENALTY)
    )


async def count_chat_tokens(request: GenerationRequest) -> int:
    """Prompt tokens the same request would use: the real chat template and tokenizer."""
    return len((await chat_prompt_tokens(request))[0])


async def chat_prompt_tokens(
    request: GenerationRequest, *, add_generation_prompt: bool = True
) -> tuple[list[int], int | None]:
    """The prompt tokens the same request would generate from (the real chat template and
    tokenizer, tools and images included), and the model's context length."""
    shown_tools = _request_tools(request.tools, request.tool_choice)
    loaded, release = await open_model(request.model)
    try:
        with_defaults = with_model_defaults(request, current_defaults(loaded))
        tokens = (await _prompt(loaded, with_defaults, shown_tools, add_generation_prompt))[1]
        return tokens, loaded.context_length
    finally:
        release()


async def _constraint(
    loaded: LoadedModel, request: GenerationRequest, tools: tuple[Tool, ...] | None, max_tokens: int
) -> tuple[GrammarProcessor | None, bool]:
    """The grammar this request generates under, if any: forced tool calls first, then JSON;
    and whether it is a tool-call grammar."""
    grammar, param = None, ""
    named = request.tool_choice.function is not None
    if tools and request.tool_choice.requires_call:
        parallel = request.parallel_tool_calls and not named
        lark = loaded.chat.tool_parser.call_grammar([tool.as_openai() for tool in tools], parallel=parallel)
        if lark is None:
            logger.info("%s's tool format cannot be constrained; asking in words", loaded.model_id)
        else:
            hf_tokenizer = getattr(loaded.tokenizer, "_tokenizer", loaded.tokenizer)
            grammar, param = lark_grammar(specialize(lark, special_tokens_of(hf_tokenizer))), "tools"
    output_format = request.output_format
    if grammar is None and output_format is not None:
        grammar, param = output_format.grammar, output_format.param
    if grammar is None:
        return None, False
    adapter = loaded.chat
    tokenizer = await asyncio.to_thread(lambda: adapter.grammar_tokenizer)
    closers = await asyncio.to_thread(lambda: adapter.grammar_closing_tokens)
    matcher = await build_matcher(tokenizer, grammar, param)
    processor = GrammarProcessor(matcher, tokenizer=tokenizer, max_tokens=max_tokens, closers=closers)
    return processor, param == "tools"
