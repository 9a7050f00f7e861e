"""Responses API requests -> the pipeline's `GenerationRequest`, and the input items as stored.

The conversation is the previous response's (its history, input and output, when
`previous_response_id` is given) followed by this request's input, all as item dicts; they
become the pipeline's `Message`s: `instructions` as the system message, `function_call`s as
the assistant's tool calls, `function_call_output`s as `role: tool` messages with the call's
id, `reasoning` summaries as the assistant's reasoning.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from pydantic import TypeAdapter

from mlx_server.errors import APIError
from mlx_server.schemas.openai import FunctionCall, ToolCall
from mlx_server.schemas.responses import (
    FunctionCallItem,
    FunctionCallOutputItem,
    FunctionTool,
    InputImage,
    InputItem,
    InputText,
    MessageItem,
    NamedFunction,
    OutputText,
    ReasoningItem,
    Refusal,
    ResponseRequest,
    TextConfig,
)
from mlx_server.services.pipeline.engine.params import GenerationParams, SamplingParams
from mlx_server.services.pipeline.model_defaults import DEFAULTABLE_SAMPLING
from mlx_server.services.pipeline.protocols.responses_render import new_item_id
from mlx_server.services.pipeline.request import (
    ContentPart,
    GenerationRequest,
    ImagePart,
    Message,
    OutputFormat,
    TextPart,
    Tool,
    ToolChoice,
    text_or_parts,
)
from mlx_server.services.pipeline.structured_output import SCHEMA_PARAM, parse_response_format

Item = dict[str, Any]
_ITEMS = TypeAdapter(list[InputItem])
_ID_PREFIX = {"message": "msg", "function_call": "fc", "function_call_output": "fco", "reasoning": "rs"}
TEXT_SCHEMA_PARAM = "text.format.schema"


def input_items(body: ResponseRequest) -> list[Item]:
    """This request's input as stored and listed: every item with an id, text as parts."""
    if isinstance(body.input, str):
        text = {"type": "input_text", "text": body.input}
        return [{"id": new_item_id("msg"), "type": "message", "role": "user", "content": [text]}]
    items: list[Item] = []
    for item in body.input:
        stored = item.model_dump(mode="json", exclude_none=True, by_alias=True)
        stored["id"] = item.id or new_item_id(_ID_PREFIX[item.type])
        if isinstance(item, MessageItem) and isinstance(item.content, str):
            kind = "output_text" if item.role == "assistant" else "input_text"
            stored["content"] = [{"type": kind, "text": item.content}]
        items.append(stored)
    return items


def responses_to_internal(
    body: ResponseRequest, model: str, history: list[Item], items: list[Item]
) -> GenerationRequest:
    """The pipeline's request: `history` (the previous response's conversation) then `items`
    (this request's input, from `input_items`)."""
    system = [Message("system", body.instructions)] if body.instructions else []
    tools = tuple(_chat_tool(tool) for tool in body.tools or ()) or None
    return GenerationRequest(
        model=model,
        params=GenerationParams(
            max_tokens=body.max_output_tokens,
            sampling=SamplingParams(temperature=body.temperature, top_p=body.top_p),
            defaultable=DEFAULTABLE_SAMPLING - body.model_fields_set,
        ),
        messages=(*system, *_messages(history, items)),
        tools=tools,
        tool_choice=_tool_choice(body, tools),
        parallel_tool_calls=body.parallel_tool_calls,
        output_format=_output_format(body.text),
        enable_thinking=body.thinking_toggle,
    )


def _messages(history: list[Item], items: list[Item]) -> list[Message]:
    messages: list[Message] = []
    calls: set[str] = set()
    for index, item in enumerate(_ITEMS.validate_python([*history, *items])):
        where = f"input[{index - len(history)}]"
        if isinstance(item, MessageItem):
            _add_message(messages, item, where)
        elif isinstance(item, FunctionCallItem):
            calls.add(item.call_id)
            call = ToolCall(id=item.call_id, function=FunctionCall(name=item.name, arguments=item.arguments))
            turn = _assistant(messages)
            messages[-1] = replace(turn, tool_calls=(*turn.tool_calls, call))
        elif isinstance(item, FunctionCallOutputItem):
            if item.call_id not in calls:
                raise APIError(
                    400,
                    f"No function_call with call_id {item.call_id!r} comes before this "
                    "function_call_output: send the call in the input, or continue its response "
                    "with previous_response_id.",
                    param=f"{where}.call_id",
                )
            messages.append(Message("tool", _output(item, where), tool_call_id=item.call_id))
        elif isinstance(item, ReasoningItem) and item.summary:
            reasoning = "\n\n".join(part.text for part in item.summary)
            messages[-1] = replace(_assistant(messages), reasoning=reasoning)
    return messages


def _assistant(messages: list[Message]) -> Message:
    """The assistant turn being written (the last message): reasoning, text and calls of one
    turn are one message."""
    if not messages or messages[-1].role != "assistant":
        messages.append(Message("assistant"))
    return messages[-1]


def _add_message(messages: list[Message], item: MessageItem, where: str) -> None:
    role = "system" if item.role == "developer" else item.role
    parts = [item.content] if isinstance(item.content, str) else item.content
    content = text_or_parts([_chat_part(part, f"{where}.content[{i}]") for i, part in enumerate(parts)])
    if role == "assistant":
        turn = _assistant(messages)
        earlier = turn.content if isinstance(turn.content, str) else ""
        messages[-1] = replace(turn, content=earlier + content if isinstance(content, str) else content)
    else:
        messages.append(Message(role, content))


def _chat_part(part: str | InputText | OutputText | Refusal | InputImage, where: str) -> ContentPart:
    if isinstance(part, str):
        return TextPart(part)
    if isinstance(part, InputText | OutputText):
        return TextPart(part.text)
    if isinstance(part, Refusal):
        return TextPart(part.refusal)
    if part.image_url is None:
        raise APIError(
            400,
            "An input_image needs an image_url (a data: URL or http(s) URL); file_id needs "
            "OpenAI's file store, which a local server does not have.",
            param=f"{where}.image_url",
        )
    return ImagePart(part.image_url, part.detail)


def _output(item: FunctionCallOutputItem, where: str) -> str | tuple[ContentPart, ...]:
    if isinstance(item.output, str):
        return item.output
    return text_or_parts([_chat_part(part, f"{where}.output[{i}]") for i, part in enumerate(item.output)])


def _chat_tool(tool: FunctionTool) -> Tool:
    return Tool(tool.name, tool.description, tool.parameters or {"type": "object", "properties": {}})


def _tool_choice(body: ResponseRequest, tools: tuple[Tool, ...] | None) -> ToolChoice:
    choice = body.tool_choice
    if (choice == "required" or isinstance(choice, NamedFunction)) and not tools:
        raise APIError(400, "tool_choice requires a call, but no tools were given.", param="tool_choice")
    if isinstance(choice, NamedFunction):
        names = [tool.name for tool in tools or ()]
        if choice.name not in names:
            raise APIError(
                400,
                f"tool_choice names {choice.name!r}, which is not one of the tools ({', '.join(names)}).",
                param="tool_choice.name",
            )
        return ToolChoice.named(choice.name)
    return ToolChoice(choice or "auto")


def _output_format(text: TextConfig | None) -> OutputFormat | None:
    """text.format as chat's response_format: the same grammar-constrained JSON."""
    spec = text.format if text is not None else None
    if spec is None or spec.type == "text":
        return None
    if spec.type == "json_schema" and spec.json_schema is None:
        raise APIError(
            400,
            'text.format of type json_schema needs a "schema" (a JSON Schema object).',
            param=TEXT_SCHEMA_PARAM,
        )
    try:
        parsed = parse_response_format({"type": spec.type, "json_schema": {"schema": spec.json_schema}})
    except APIError as exc:
        message = exc.message.replace(SCHEMA_PARAM, TEXT_SCHEMA_PARAM)
        raise APIError(exc.status, message, param=TEXT_SCHEMA_PARAM, code=exc.code) from None
    assert parsed is not None
    return replace(parsed, param=TEXT_SCHEMA_PARAM if spec.type == "json_schema" else "text.format")


def request_echo(body: ResponseRequest, model: str) -> dict[str, Any]:
    """What a response repeats of its request (the renderer's `base`), for the local `model`."""
    text_format = body.text.format if body.text is not None else None
    tools = [{**tool.model_dump(exclude_none=True), "strict": bool(tool.strict)} for tool in body.tools or []]
    choice = body.tool_choice
    return {
        "model": model,
        "instructions": body.instructions,
        "max_output_tokens": body.max_output_tokens,
        "metadata": body.metadata or {},
        "parallel_tool_calls": body.parallel_tool_calls,
        "previous_response_id": body.previous_response_id,
        "reasoning": {"effort": body.reasoning.effort if body.reasoning else None, "summary": None},
        "store": body.store,
        "temperature": body.temperature,
        "text": {
            "format": text_format.model_dump(exclude_none=True, by_alias=True)
            if text_format
            else {"type": "text"}
        },
        "tool_choice": choice.model_dump() if isinstance(choice, NamedFunction) else (choice or "auto"),
        "tools": tools,
        "top_p": body.top_p,
        "truncation": "disabled",
        "user": None,
    }
