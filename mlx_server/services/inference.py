"""The single inference pipeline (blueprint §4.1, §10.4): every protocol ends up here.

`generate_chat_completion()` takes OpenAI-format message dicts (every field kept) and returns
an OpenAI response dict, or a `ChunkStream` of OpenAI chunks. Everything that can fail on the
request (unknown model, overload, a template that rejects the messages, a prompt longer than
the context) fails before the first chunk, so clients get a proper status code.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncGenerator, Callable
from dataclasses import replace
from typing import Any

from mlx_server.errors import APIError
from mlx_server.models.adapters import ChatTemplateError
from mlx_server.models.pool import LoadedModel, get_model_pool
from mlx_server.schemas.openai import ToolCall
from mlx_server.services import openai_format as fmt
from mlx_server.services.chat_turn import ChatTurn, forced_tool
from mlx_server.services.constraints import (
    GrammarProcessor,
    build_matcher,
    lark_grammar,
    special_tokens_of,
    specialize,
)
from mlx_server.services.generation import (
    CompletionStats,
    GenerationParams,
    TextDelta,
    TokenLogprob,
    admission,
    generate_text,
)
from mlx_server.services.generation_defaults import default_max_tokens
from mlx_server.services.structured_output import OutputFormat, output_problem

logger = logging.getLogger("mlx_server.inference")

CONSTRAINED_REPETITION_PENALTY = 1.1


class ChunkStream:
    """A stream of response chunks that holds its model lease and admission slot until it ends.

    Released exactly once: when iteration ends, fails or is abandoned, or, for a stream that
    was never iterated (a client gone before the response started), when it is collected.
    """

    def __init__(
        self,
        chunks: AsyncGenerator[dict[str, Any], None],
        release: Callable[[], None],
        turn: ChatTurn | None = None,
    ) -> None:
        self._chunks = chunks
        self._release: Callable[[], None] | None = release
        self._turn = turn

    @property
    def rejected_calls(self) -> list[tuple[ToolCall, str]]:
        """Tool calls dropped so far (an agent loop in this process feeds them back)."""
        return self._turn.rejected_calls if self._turn is not None else []

    def __aiter__(self) -> AsyncGenerator[dict[str, Any], None]:
        return self._iterate()

    async def _iterate(self) -> AsyncGenerator[dict[str, Any], None]:
        try:
            async for chunk in self._chunks:
                yield chunk
        finally:
            await self._chunks.aclose()
            self.release()

    def release(self) -> None:
        release, self._release = self._release, None
        if release is not None:
            release()

    def __del__(self) -> None:
        self.release()


async def open_model(model_id: str) -> tuple[LoadedModel, Callable[[], None]]:
    """Admit the request and lease its model; the callable gives both back."""
    admission.acquire()
    pool = get_model_pool()
    try:
        loaded = await pool.acquire(model_id)
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
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]] | None,
    enable_thinking: bool | None,
    instruction: str | None = None,
) -> str:
    adapter = loaded.adapter
    try:
        converted = adapter.convert_messages(messages)  # content is plain text from here on
        if tools and not adapter.supports_native_tools():
            converted = adapter.add_system_text(converted, adapter.format_tools_for_prompt(tools))
            tools = None
        if instruction is not None:
            converted = adapter.add_system_text(converted, instruction)
        text = adapter.apply_chat_template(converted, tools=tools, enable_thinking=enable_thinking)
    except ChatTemplateError as exc:
        raise APIError(400, str(exc), param="messages") from exc
    logger.debug("prompt for %s:\n%s", loaded.model_id, text)
    return text


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
    if room <= 0:
        raise APIError(
            400,
            f"The prompt is {prompt_tokens} tokens, but {loaded.model_id!r} has a context of {context} "
            "tokens; shorten the prompt.",
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
            f"{context} tokens; set max_tokens to at most {room}.",
            param="max_tokens",
            code="context_length_exceeded",
        )
    return requested


def check_logit_bias(loaded: LoadedModel, params: GenerationParams) -> None:
    vocab = len(loaded.tokenizer.get_vocab())
    bad = [t for t in params.sampling.logit_bias or {} if not 0 <= t < vocab]
    if bad:
        raise APIError(
            400,
            f"logit_bias names token ids outside the vocabulary (0..{vocab - 1}): {bad[:5]}",
            param="logit_bias",
        )


def _tool_choice_instruction(tool_choice: str | dict[str, Any] | None) -> str | None:
    """Without constrained decoding, a required call is asked for in words; the reply is checked."""
    name = forced_tool(tool_choice)
    if name is not None:
        return f"You must answer by calling the function {name!r}."
    if tool_choice == "required":
        return "You must answer by calling one or more of the tools."
    return None


def _request_tools(
    tools: list[dict[str, Any]] | None, tool_choice: str | dict[str, Any] | None
) -> list[dict[str, Any]] | None:
    """The tools the model is shown: none for tool_choice "none", only the named one when forced."""
    if not tools or tool_choice == "none":
        return None
    name = forced_tool(tool_choice)
    if name is None:
        return tools
    named = [t for t in tools if (t.get("function") or {}).get("name") == name]
    if not named:
        raise APIError(400, f"tool_choice names {name!r}, which is not among the tools.", param="tool_choice")
    return named


async def generate_chat_completion(
    model_id: str,
    messages: list[dict[str, Any]],
    *,
    params: GenerationParams,
    tools: list[dict[str, Any]] | None = None,
    tool_choice: str | dict[str, Any] | None = None,
    parallel_tool_calls: bool = True,
    output_format: OutputFormat | None = None,
    enable_thinking: bool | None = None,
    stream: bool = False,
    include_usage: bool = False,
    stats: CompletionStats | None = None,
) -> dict[str, Any] | ChunkStream:
    """Chat completion through the model's adapter; `stats` (if given) is filled as it runs.

    The reply is split into content, reasoning (`reasoning_content`) and tool calls checked
    against `tools` by one StreamingProcessor, streamed or not. A required or named tool call
    is constrained to the model's own call format with schema-valid arguments (when its parser
    provides a grammar), and `output_format` constrains the reply to JSON (schema).
    """
    stats = stats if stats is not None else CompletionStats()
    shown_tools = _request_tools(tools, tool_choice)
    instruction = _tool_choice_instruction(tool_choice) if shown_tools else None
    loaded, release = await open_model(model_id)
    try:
        prompt_text = _chat_prompt(loaded, messages, shown_tools, enable_thinking, instruction)
        prompt = encode(loaded, prompt_text)
        max_tokens = max_tokens_for(
            loaded, len(prompt), params.max_tokens, "messages", ceiling=params.max_tokens_is_ceiling
        )
        stats.prompt_tokens = len(prompt)  # known before the first chunk (Anthropic's message_start)
        check_logit_bias(loaded, params)
        constraint, constrained_calls = await _constraint(
            loaded, shown_tools, tool_choice, parallel_tool_calls, output_format, max_tokens
        )
    except BaseException:
        release()
        raise
    if constraint is not None and params.sampling.repetition_penalty is None:
        # Inside a grammar a small model's greedy loops ("1000000…", a phrase again and again in
        # an unbounded string) run to max_tokens and leave invalid JSON; a mild penalty, as
        # llama.cpp and LM Studio apply by default, breaks them. A request's own value wins.
        params = replace(
            params, sampling=replace(params.sampling, repetition_penalty=CONSTRAINED_REPETITION_PENALTY)
        )
    turn = ChatTurn(
        loaded.adapter,
        prompt=prompt_text,
        tools=shown_tools,
        tool_choice=tool_choice,
        logprobs=params.top_logprobs is not None,
        constrained_calls=constrained_calls,
    )
    deltas = generate_text(loaded, prompt, params, max_tokens, stats, constraint)
    if stream:
        chunks = fmt.ChunkFactory(model_id, chat=True, include_usage=include_usage)
        return ChunkStream(_chat_chunks(deltas, chunks, stats, turn), release, turn)
    logprobs: list[TokenLogprob] = []
    finish_reason: str | None = None
    try:
        async for delta in deltas:
            turn.feed(delta.text, [])
            logprobs.extend(delta.logprobs)
            finish_reason = delta.finish_reason or finish_reason
            if turn.done:
                break
    finally:
        await deltas.aclose()
        release()
    turn.finish()
    message = turn.message()
    warnings = turn.warnings()
    if output_format is not None and not turn.calls:
        problem = output_problem(message["content"] or "", output_format)
        if problem is not None:
            cause = (
                "max_tokens ran out first; raise it" if finish_reason == "length" else "please report this"
            )
            warnings.append(f"{problem} ({cause})")
    wanted = logprobs if params.top_logprobs is not None else None
    return fmt.chat_completion(model_id, message, turn.finish_reason(finish_reason), wanted, stats, warnings)


async def count_chat_tokens(
    model_id: str,
    messages: list[dict[str, Any]],
    *,
    tools: list[dict[str, Any]] | None = None,
    tool_choice: str | dict[str, Any] | None = None,
    enable_thinking: bool | None = None,
) -> int:
    """Prompt tokens the same request would use: the real chat template and tokenizer."""
    shown_tools = _request_tools(tools, tool_choice)
    instruction = _tool_choice_instruction(tool_choice) if shown_tools else None
    loaded, release = await open_model(model_id)
    try:
        return len(encode(loaded, _chat_prompt(loaded, messages, shown_tools, enable_thinking, instruction)))
    finally:
        release()


async def _constraint(
    loaded: LoadedModel,
    tools: list[dict[str, Any]] | None,
    tool_choice: str | dict[str, Any] | None,
    parallel: bool,
    output_format: OutputFormat | None,
    max_tokens: int,
) -> tuple[GrammarProcessor | None, bool]:
    """The grammar this request generates under, if any: forced tool calls first, then JSON;
    and whether it is a tool-call grammar."""
    grammar, param = None, ""
    named = forced_tool(tool_choice) is not None
    if tools and (tool_choice == "required" or named):
        lark = loaded.adapter.tool_parser.call_grammar(tools, parallel=parallel and not named)
        if lark is None:
            logger.info("%s's tool format cannot be constrained; asking in words", loaded.model_id)
        else:
            hf_tokenizer = getattr(loaded.tokenizer, "_tokenizer", loaded.tokenizer)
            grammar, param = lark_grammar(specialize(lark, special_tokens_of(hf_tokenizer))), "tools"
    if grammar is None and output_format is not None:
        grammar, param = output_format.grammar, output_format.param
    if grammar is None:
        return None, False
    adapter = loaded.adapter
    tokenizer = await asyncio.to_thread(lambda: adapter.grammar_tokenizer)
    closers = await asyncio.to_thread(lambda: adapter.grammar_closing_tokens)
    matcher = await build_matcher(tokenizer, grammar, param)
    processor = GrammarProcessor(matcher, tokenizer=tokenizer, max_tokens=max_tokens, closers=closers)
    return processor, param == "tools"


async def _chat_chunks(
    deltas: AsyncGenerator[TextDelta, None], chunks: fmt.ChunkFactory, stats: CompletionStats, turn: ChatTurn
) -> AsyncGenerator[dict[str, Any], None]:
    yield chunks.chunk(
        {"delta": {"role": "assistant", "content": ""}, "logprobs": None, "finish_reason": None}
    )
    finish_reason: str | None = None
    try:
        async for delta in deltas:
            for choice in turn.feed(delta.text, delta.logprobs):
                yield chunks.chunk(choice)
            finish_reason = delta.finish_reason or finish_reason
            if turn.done:
                break
    finally:
        await deltas.aclose()
    for choice in turn.finish():
        yield chunks.chunk(choice)
    final: dict[str, Any] = {
        "delta": {},
        "logprobs": None,
        "finish_reason": turn.finish_reason(finish_reason),
    }
    yield chunks.chunk(final)
    if chunks.include_usage:
        yield chunks.usage_chunk(stats)
