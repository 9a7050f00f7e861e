"""The model probe (blueprint §10.2): what a model can do, found once by running it.

`probe_model()` detects the type and family, loads the model through the pool, checks whether
the chat template renders tools itself, asks for a `get_weather` call, looks for reasoning,
estimates how many tokens fit in memory, and stores it all in `ModelCapabilities`. Each step is
reported to `on_step` as it starts and as it ends, for a page or a terminal to show.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from jinja2 import TemplateError
from sqlmodel import Session

from mlx_server.errors import APIError
from mlx_server.models.adapters import ModelAdapter, create_adapter
from mlx_server.models.detection import ModelType, detect_model_family, detect_model_type, read_chat_template
from mlx_server.models.loaders import LoadedModel, read_spec
from mlx_server.models.pool import get_model_pool
from mlx_server.models.store import save_capabilities
from mlx_server.parsers.registry import TOOL_PARSERS
from mlx_server.records import ModelCapabilities
from mlx_server.services.operations.probe_audio import probe_audio_model
from mlx_server.services.operations.probe_embeddings import probe_embedding_model
from mlx_server.services.operations.probe_parsers import (
    TOOL_NAME,
    WEATHER_TOOL,
    find_thinking_parser,
    find_tool_parser,
    template_mentions_thinking,
)
from mlx_server.services.operations.probe_rerank import probe_rerank_model
from mlx_server.services.operations.probe_steps import ProbeStep, ProbeSteps, run_probe
from mlx_server.services.operations.probe_vision import check_images
from mlx_server.services.pipeline.engine.generation import generate_text
from mlx_server.services.pipeline.engine.params import CompletionStats, GenerationParams, SamplingParams
from mlx_server.services.pipeline.inference import encode, max_tokens_for, open_model
from mlx_server.utils.memory import GB, activation_bytes, kv_bytes_per_token, practical_max_tokens
from mlx_server.utils.metal import run_on_metal_thread

logger = logging.getLogger("mlx_server.probe")

# Short prompts and budgets: prefill and decode run at ~10 tokens/s on a CPU build.
TOOL_QUESTION = "What is the weather in Paris? Use the get_weather tool."
THINKING_QUESTION = "What is 17 + 25? Think step by step."
TOOL_MAX_TOKENS = 48
THINKING_MAX_TOKENS = 32

STEP_NAMES = ("detect", "load", "native_tools", "tool_calls", "thinking", "max_tokens", "save", "unload")
# A vision model's probe also passes images through its processor and model before saving.
VISION_STEP_NAMES = (*STEP_NAMES[:-2], "vision", *STEP_NAMES[-2:])


class ProbeRunningError(APIError):
    def __init__(self, model_id: str) -> None:
        super().__init__(
            409,
            f"A probe of {model_id!r} is already running; wait for it to finish, then probe again.",
            param="model",
            code="probe_running",
        )


@dataclass(frozen=True)
class _Findings:
    native_tools: bool
    tool_parser_id: str  # "null" when no parser read a call
    default_tool_parser_id: str
    thinking_parser_id: str
    practical_max_tokens: int | None
    supports_multi_image: bool | None = None  # vision models only


_running: set[str] = set()


def is_probe_running(model_id: str) -> bool:
    return model_id in _running


async def probe_model(
    model_id: str, *, on_step: Callable[[ProbeStep], None] | None = None
) -> ModelCapabilities:
    """Probe `model_id`, store its `ModelCapabilities` (probed_at now) and return them.

    The model is leased from the pool for the probe and unloaded afterwards unless it is pinned
    or was loaded before. A second probe of the same model while one runs raises
    `ProbeRunningError`; an unknown model `ModelNotFoundError`. Nothing is stored if a step fails.
    """
    if model_id in _running:
        raise ProbeRunningError(model_id)
    _running.add(model_id)
    try:
        return await _probe(model_id, ProbeSteps(on_step))
    finally:
        _running.discard(model_id)


_AUDIO_TYPES = (ModelType.SPEECH_TO_TEXT, ModelType.TEXT_TO_SPEECH)


async def _probe(model_id: str, steps: ProbeSteps) -> ModelCapabilities:
    with steps.step("detect") as outcome:
        spec = read_spec(model_id)  # ModelNotFoundError, or missing files, before anything loads
        model_type = detect_model_type(spec.path, spec.config)
        family = detect_model_family(model_id, spec.config, read_chat_template(spec.path))
        if model_type in _AUDIO_TYPES:
            family = str(spec.config.get("model_type") or family)  # whisper, kokoro, ...
        outcome.detail = f"type {model_type}, family {family}"
    if model_type is ModelType.EMBEDDINGS:
        return await probe_embedding_model(model_id, family, steps)
    if model_type is ModelType.RERANK:
        return await probe_rerank_model(model_id, family, steps)
    if model_type in _AUDIO_TYPES:
        return await probe_audio_model(model_id, model_type, family, steps)
    pool = get_model_pool()

    async def check(loaded: LoadedModel) -> _Findings:
        findings = await _examine(loaded, family, pool.budget_bytes, steps)
        if model_type is ModelType.VISION:
            with steps.step("vision") as outcome:
                multi_image, outcome.detail = await check_images(loaded)
            findings = replace(findings, supports_multi_image=multi_image)
        return findings

    def save(session: Session, loaded: LoadedModel, findings: _Findings) -> ModelCapabilities:
        return _save(session, model_id, model_type, family, findings)

    return await run_probe(model_id, steps, lease=lambda: open_model(model_id), check=check, save=save)


async def _examine(loaded: LoadedModel, family: str, budget_bytes: int, steps: ProbeSteps) -> _Findings:
    with steps.step("native_tools") as outcome:
        native = renders_tools(loaded.tokenizer)
        outcome.detail = (
            "the chat template renders tools itself"
            if native
            else "the chat template ignores tools; they go into the system prompt"
        )
    # The family's default parsers, not those of an earlier probe: a re-probe starts over.
    adapter = create_adapter(
        family, loaded.tokenizer, ModelCapabilities(model_id=loaded.model_id, supports_native_tools=native)
    )
    tool_parser_id = thinking_parser_id = "null"
    with steps.step("tool_calls") as outcome:
        if not adapter.has_chat_template:
            outcome.status, outcome.detail = "skipped", "no chat template: no tool calls"
        else:
            tool_prompt = _tool_prompt(adapter)
            tool_output = await _generate(loaded, tool_prompt, TOOL_MAX_TOKENS)
            tool_parser_id = find_tool_parser(adapter.tool_parser.parser_id, tool_output)
            outcome.detail = _tool_detail(adapter.tool_parser.parser_id, tool_parser_id, tool_output)
    with steps.step("thinking") as outcome:
        if not adapter.has_chat_template:
            outcome.status, outcome.detail = "skipped", "no chat template: no reasoning"
        else:
            prompt, output, source = tool_prompt, tool_output, "the tool reply"
            if template_mentions_thinking(str(loaded.tokenizer.chat_template)):
                prompt = _thinking_prompt(adapter)
                output = await _generate(loaded, prompt, THINKING_MAX_TOKENS)
                source = "a reply with enable_thinking"
            thinking_parser_id = find_thinking_parser(adapter.thinking_parser.parser_id, prompt, output)
            found = "no reasoning" if thinking_parser_id == "null" else f"{thinking_parser_id} reasoning"
            outcome.detail = f"{found} in {source}"
    with steps.step("max_tokens") as outcome:
        dtype_bytes = await run_on_metal_thread(lambda: activation_bytes(loaded.model))
        practical = practical_max_tokens(
            loaded.config, budget_bytes=budget_bytes, weights_bytes=loaded.size_bytes, dtype_bytes=dtype_bytes
        )
        per_token = kv_bytes_per_token(loaded.config, dtype_bytes)
        outcome.detail = f"{practical} tokens (context {loaded.trained_context_length}"
        if per_token:
            free = max(0, budget_bytes - loaded.size_bytes)
            outcome.detail += f"; {per_token} KV bytes per token, {free / GB:.2f} GB beside the weights"
        outcome.detail += ")"
    return _Findings(native, tool_parser_id, adapter.tool_parser.parser_id, thinking_parser_id, practical)


def _render(tokenizer: Any, messages: list[dict[str, Any]], **template_kwargs: Any) -> str:
    return str(
        tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False, **template_kwargs)
    )


def renders_tools(tokenizer: Any) -> bool:
    """Whether the chat template writes `tools=` into the prompt: tried, not guessed from its text."""
    messages = [{"role": "user", "content": "Hi"}]
    try:
        with_tools = _render(tokenizer, messages, tools=[WEATHER_TOOL.as_openai()])
        return TOOL_NAME in with_tools and with_tools != _render(tokenizer, messages)
    except (TemplateError, TypeError, ValueError):  # no template, or one that refuses tools
        return False


def _tool_prompt(adapter: ModelAdapter) -> str:
    """The prompt inference would build for this question and tool (inference's `_chat_prompt`)."""
    messages = adapter.convert_messages([{"role": "user", "content": TOOL_QUESTION}])
    if adapter.supports_native_tools():
        return adapter.apply_chat_template(messages, tools=[WEATHER_TOOL.as_openai()], enable_thinking=False)
    messages = adapter.add_system_text(messages, adapter.format_tools_for_prompt([WEATHER_TOOL.as_openai()]))
    return adapter.apply_chat_template(messages, enable_thinking=False)


def _thinking_prompt(adapter: ModelAdapter) -> str:
    # The template's own switch: the adapter passes enable_thinking only when its thinking
    # parser has a toggle, and the family default may be the null parser.
    messages = adapter.convert_messages([{"role": "user", "content": THINKING_QUESTION}])
    return _render(adapter.tokenizer, messages, enable_thinking=True)


async def _generate(loaded: LoadedModel, prompt: str, max_tokens: int) -> str:
    """Greedy text of one short generation on the leased model, through inference's token loop."""
    tokens = encode(loaded, prompt)
    budget = max_tokens_for(loaded, len(tokens), max_tokens, "messages")
    params = GenerationParams(max_tokens=budget, sampling=SamplingParams(temperature=0.0))
    deltas = generate_text(loaded, tokens, params, budget, CompletionStats())
    parts: list[str] = []
    try:
        async for delta in deltas:
            parts.append(delta.text)
    finally:
        await deltas.aclose()
    return "".join(parts)


def _tool_detail(default_id: str, found_id: str, output: str) -> str:
    if found_id == default_id and not TOOL_PARSERS[found_id]().validates(output, TOOL_NAME):
        return f"{found_id} (the family default) took a {TOOL_NAME} call written as plain JSON"
    if found_id == default_id:
        return f"{found_id} (the family default) read a {TOOL_NAME} call"
    if found_id != "null":
        return f"{found_id} read a {TOOL_NAME} call (the family default {default_id} did not)"
    excerpt = " ".join(output.split())[:120]
    return f"no parser read a {TOOL_NAME} call; the model wrote: {excerpt!r}"


def _save(
    session: Session, model_id: str, model_type: ModelType, family: str, findings: _Findings
) -> ModelCapabilities:
    tools_work = findings.tool_parser_id != "null"
    return save_capabilities(
        session,
        model_id,
        model_type=str(model_type),
        model_family=family,
        # A model that wrote no readable call keeps its family's format (tool_format None says
        # "unverified"): storing "null" would also switch off the call grammar, which makes
        # even such a model write valid calls under tool_choice "required".
        tool_parser_id=findings.tool_parser_id if tools_work else findings.default_tool_parser_id,
        thinking_parser_id=findings.thinking_parser_id,
        supports_native_tools=findings.native_tools,
        supports_thinking=findings.thinking_parser_id != "null",
        tool_format=("native" if findings.native_tools else "injection") if tools_work else None,
        practical_max_tokens=findings.practical_max_tokens,
        supports_multi_image=findings.supports_multi_image,
    )
