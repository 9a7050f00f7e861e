"""Ollama requests -> the pipeline's `GenerationRequest`.

Model names are the server's model ids; `id:latest` and the configured aliases are accepted.
Options map onto GenerationParams with Ollama's own defaults where the client sets none
(temperature 0.8, top_k 40, top_p 0.9). Messages become the pipeline's `Message`: base64
`images` become image parts, an assistant's `tool_calls` (arguments as objects) get call ids,
and a `tool` message is matched to the earliest unanswered call of its `tool_name` (Ollama has
no call ids).
"""

from __future__ import annotations

import json
from typing import Any

from mlx_server.database import background_session
from mlx_server.errors import APIError
from mlx_server.models.store import get_model
from mlx_server.schemas.ollama import (
    RANDOM_SEED,
    OllamaChatRequest,
    OllamaGenerateRequest,
    OllamaMessage,
    OllamaOptions,
    OutputFormatField,
    ThinkField,
)
from mlx_server.schemas.openai import FunctionCall, ToolCall
from mlx_server.services.pipeline.catalog import resolve_model
from mlx_server.services.pipeline.engine.params import GenerationParams, SamplingParams
from mlx_server.services.pipeline.protocols.openai_request import chat_tools
from mlx_server.services.pipeline.request import (
    ContentPart,
    GenerationRequest,
    ImagePart,
    Message,
    OutputFormat,
    TextPart,
)
from mlx_server.services.pipeline.structured_output import parse_response_format

# Ollama's defaults for a model whose Modelfile sets none.
DEFAULT_TEMPERATURE = 0.8
DEFAULT_TOP_K = 40
DEFAULT_TOP_P = 0.9
LATEST_TAG = ":latest"


def ollama_model(name: str) -> str:
    """The local model an Ollama request names: the id itself, the id without `:latest`, or
    an alias's target; an unknown name is a 404 saying where the names are listed."""
    # Resolved per generation request, like catalog.resolve_model: a short session of its own,
    # so a streamed reply holds none.
    with background_session() as session:
        for candidate in (name, name.removesuffix(LATEST_TAG), resolve_model(name)):
            if get_model(session, candidate) is not None:
                return candidate
    raise APIError(
        404,
        f"model {name!r} not found. This server's model names are its model ids (with or without "
        "':latest'); GET /api/tags lists them.",
        param="model",
        code="model_not_found",
    )


# SamplingParams field -> the Ollama option that sets it.
_OPTIONS = {
    "temperature": "temperature",
    "top_p": "top_p",
    "top_k": "top_k",
    "min_p": "min_p",
    "repetition_penalty": "repeat_penalty",
}


def generation_params(options: OllamaOptions | None) -> GenerationParams:
    o = options or OllamaOptions()
    if o.num_predict == 0:
        raise APIError(
            400,
            "options.num_predict must be a number of tokens (at least 1), or -1 for no limit.",
            param="options.num_predict",
        )
    sampling = SamplingParams(
        temperature=DEFAULT_TEMPERATURE if o.temperature is None else o.temperature,
        top_p=DEFAULT_TOP_P if o.top_p is None else o.top_p,
        top_k=DEFAULT_TOP_K if o.top_k is None else o.top_k,
        min_p=o.min_p or 0.0,
        repetition_penalty=o.repeat_penalty,
        presence_penalty=o.presence_penalty or 0.0,
        frequency_penalty=o.frequency_penalty or 0.0,
        seed=None if o.seed == RANDOM_SEED else o.seed,
    )
    max_tokens = o.num_predict if o.num_predict is not None and o.num_predict > 0 else None
    # Options the client left out: the model's defaults first, Ollama's own above otherwise.
    unset = frozenset(name for name, option in _OPTIONS.items() if getattr(o, option) is None)
    return GenerationParams(
        max_tokens=max_tokens, stop=list(o.stop or []), sampling=sampling, defaultable=unset
    )


def output_format(value: OutputFormatField) -> OutputFormat | None:
    """`format`: "json" (any JSON object) or a JSON Schema, constrained as chat's response_format."""
    if value == "json":
        return parse_response_format({"type": "json_object"})
    if isinstance(value, dict):
        return parse_response_format({"type": "json_schema", "json_schema": {"schema": value}})
    return None


def thinking(value: ThinkField) -> bool | None:
    """`think`: true/false, or a level ("low"...), which turns thinking on where the template can."""
    return value if value is None or isinstance(value, bool) else True


def image_url(data: str) -> str:
    """An Ollama image (base64, as its clients send files) as the data: URL the pipeline reads."""
    return data if data.startswith("data:") else f"data:application/octet-stream;base64,{data}"


def _content(text: str, images: list[str] | None) -> str | tuple[ContentPart, ...]:
    if not images:
        return text
    parts = tuple(ImagePart(image_url(i)) for i in images)
    return (*parts, TextPart(text)) if text else parts


def chat_messages(messages: list[OllamaMessage]) -> tuple[Message, ...]:
    converted: list[Message] = []
    unanswered: list[tuple[str, str]] = []  # (call id, tool name), oldest first
    for index, message in enumerate(messages):
        text = message.content or ""
        if message.role == "assistant" and message.tool_calls:
            unanswered = [(f"call_{index}_{n}", c.function.name) for n, c in enumerate(message.tool_calls)]
            calls = tuple(
                ToolCall(
                    id=call_id, function=FunctionCall(name=name, arguments=json.dumps(c.function.arguments))
                )
                for (call_id, name), c in zip(unanswered, message.tool_calls, strict=True)
            )
            converted.append(Message("assistant", text, tool_calls=calls))
        elif message.role == "tool":
            answered = next((u for u in unanswered if u[1] == message.tool_name), None)
            answered = answered or (unanswered[0] if unanswered else None)
            if answered is not None:
                unanswered.remove(answered)
            call_id = answered[0] if answered is not None else None
            converted.append(Message("tool", text, tool_call_id=call_id, name=message.tool_name or None))
        else:
            converted.append(Message(message.role, _content(text, message.images)))
    return tuple(converted)


def chat_request(body: OllamaChatRequest, model: str) -> GenerationRequest:
    return GenerationRequest(
        model=model,
        params=generation_params(body.options),
        messages=chat_messages(body.messages),
        tools=chat_tools(body.tools),
        output_format=output_format(body.format),
        enable_thinking=thinking(body.think),
    )


def _check_generate(body: OllamaGenerateRequest) -> None:
    unsupported = {
        "suffix": "suffix (fill-in-the-middle) is not supported; send the text before the gap as the prompt.",
        "template": "template is not supported: the model's own chat template is used. Send raw=true "
        "with the whole prompt formatted to write it yourself.",
        "context": "context (the tokens of an earlier /api/generate reply) is not kept by this server; "
        "send the conversation to /api/chat instead.",
    }
    for field, message in unsupported.items():
        if getattr(body, field):
            raise APIError(400, message, param=field)
    if body.raw and (body.format or body.images or body.system):
        raise APIError(
            400,
            "raw=true sends the prompt as it is; format, images and system need the chat template. "
            "Drop raw, or put everything in the prompt.",
            param="raw",
        )


def generate_request(body: OllamaGenerateRequest, model: str) -> GenerationRequest:
    """A raw prompt is continued as it is; otherwise it is one user turn (after `system`)
    through the model's chat template, as Ollama does."""
    _check_generate(body)
    if body.raw:
        return GenerationRequest(model=model, params=generation_params(body.options), prompt=body.prompt)
    system = (Message("system", body.system),) if body.system else ()
    messages = (*system, Message("user", _content(body.prompt, body.images)))
    return GenerationRequest(
        model=model,
        params=generation_params(body.options),
        messages=messages,
        output_format=output_format(body.format),
        enable_thinking=thinking(body.think),
    )


def request_parameters(body: OllamaChatRequest | OllamaGenerateRequest) -> dict[str, Any]:
    """How the client asked to generate, for the audit row: its options, format kind, think,
    keep_alive and the names of its tools (never the prompt or the tool definitions)."""
    parameters: dict[str, Any] = body.options.model_dump(exclude_none=True) if body.options else {}
    if body.format:
        parameters["format"] = "json_schema" if isinstance(body.format, dict) else body.format
    if body.think is not None:
        parameters["think"] = body.think
    if body.keep_alive is not None:
        parameters["keep_alive"] = body.keep_alive
    tools = getattr(body, "tools", None)
    if tools:
        parameters["tools"] = [tool["function"]["name"] for tool in tools]
    return parameters
