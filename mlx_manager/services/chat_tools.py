"""Tools for the chat playground's agent loop: built-ins that run here, and user-defined ones.

Built-in tools run in-process and reach nothing outside it: a whitelisted arithmetic
evaluator, the clock, and an echo. `execute_tool` never raises: whatever goes wrong becomes a
`ToolResult` with `is_error=True` whose text tells the model what to fix. User-defined tools
come from the tool editor as JSON and are checked by `parse_tool_definitions`; their results
are typed by the user (manual mode), but their calls are checked with `check_arguments` too.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError, best_match
from jsonschema.validators import validator_for
from referencing import Registry, Resource
from referencing.exceptions import Unresolvable
from referencing.jsonschema import DRAFT202012

from mlx_manager.services.calculator import CalculatorError, evaluate, format_number

logger = logging.getLogger("mlx_manager.chat_tools")

TOOL_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
MAX_DEFINITIONS_BYTES = 64 * 1024
MAX_SHOWN_ARGUMENTS = 200


@dataclass(frozen=True)
class ToolResult:
    """What goes back to the model as the tool message."""

    content: str
    is_error: bool = False


@dataclass(frozen=True)
class BuiltinTool:
    definition: dict[str, Any]
    run: Callable[[dict[str, Any]], ToolResult]

    @property
    def name(self) -> str:
        return str(self.definition["function"]["name"])


def _definition(
    name: str, description: str, properties: dict[str, Any], required: list[str]
) -> dict[str, Any]:
    parameters = {
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": False,
    }
    return {
        "type": "function",
        "function": {"name": name, "description": description, "parameters": parameters},
    }


def _calculator(arguments: dict[str, Any]) -> ToolResult:
    try:
        return ToolResult(format_number(evaluate(arguments["expression"])))
    except CalculatorError as exc:
        return ToolResult(f"Error: {exc}", is_error=True)


def _current_time(arguments: dict[str, Any]) -> ToolResult:
    name = arguments.get("timezone", "UTC")
    try:
        zone = ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        return ToolResult(
            f"Error: unknown time zone {name!r}; use an IANA name such as 'Europe/Paris', "
            "'America/New_York' or 'UTC'",
            is_error=True,
        )
    now = datetime.now(zone)
    return ToolResult(f"{now.isoformat(timespec='seconds')} ({now:%A}, {name})")


def _echo(arguments: dict[str, Any]) -> ToolResult:
    return ToolResult(arguments["text"])


BUILTIN_TOOLS: dict[str, BuiltinTool] = {
    tool.name: tool
    for tool in (
        BuiltinTool(
            _definition(
                "calculator",
                "Evaluate an arithmetic expression exactly. Supports + - * / // % ** and parentheses, "
                "constants pi, e, tau and functions sqrt, sin, cos, tan, asin, acos, atan, log, log10, "
                "exp, floor, ceil, fabs, abs, round, min, max.",
                {"expression": {"type": "string", "description": "For example: (2 + 3) * sqrt(16) / 4"}},
                ["expression"],
            ),
            _calculator,
        ),
        BuiltinTool(
            _definition(
                "current_time",
                "The current date and time (ISO 8601) and weekday in a time zone.",
                {
                    "timezone": {
                        "type": "string",
                        "description": "IANA time zone such as Europe/Paris; default UTC",
                    }
                },
                [],
            ),
            _current_time,
        ),
        BuiltinTool(
            _definition(
                "echo",
                "Return the given text unchanged.",
                {"text": {"type": "string", "description": "The text to return"}},
                ["text"],
            ),
            _echo,
        ),
    )
}


class ArgumentError(ValueError):
    """A tool call's arguments are not JSON, not an object, or break the tool's schema."""


def _path(parts: Iterable[Any], root: str = "") -> str:
    text = root
    for part in parts:
        text += f"[{part}]" if isinstance(part, int) else f".{part}" if text else str(part)
    return text


def _reject_constant(token: str) -> Any:
    raise ValueError(f"{token} is not valid JSON")


def _strict_json(text: str) -> Any:
    """`text` as JSON, without NaN or Infinity; ValueError says what is wrong and where."""
    try:
        return json.loads(text, parse_constant=_reject_constant)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{exc.msg} at line {exc.lineno}, column {exc.colno}") from None
    except RecursionError as exc:  # nesting deeper than Python's stack
        raise ValueError(str(exc)) from None


def check_arguments(parameters: dict[str, Any], arguments: str | dict[str, Any]) -> dict[str, Any]:
    """The call's arguments as a dict, valid under `parameters` (a schema `parse_tool_definitions`
    accepted); `ArgumentError` names the problem and the field. An empty string means `{}`."""
    if isinstance(arguments, str):
        try:
            value = _strict_json(arguments) if arguments.strip() else {}
        except ValueError as exc:
            raise ArgumentError(f"the arguments are not valid JSON ({exc})") from None
    else:
        value = arguments
    if not isinstance(value, dict):
        raise ArgumentError(f"the arguments must be a JSON object, not {type(value).__name__}")
    error = best_match(validator_for(parameters)(parameters).iter_errors(value))
    if error is not None:
        where = _path(error.absolute_path)
        raise ArgumentError(f"{where}: {error.message}" if where else error.message)
    return value


def rejected_call_result(name: str, arguments: str, reason: str) -> str:
    """The tool message for a call that was not run because its arguments were wrong."""
    shown = arguments if len(arguments) <= MAX_SHOWN_ARGUMENTS else arguments[:MAX_SHOWN_ARGUMENTS] + "…"
    return (
        f"Error: the call to {name} was not run: {reason.rstrip('.')}. You sent: {shown}\n"
        f"Call {name} again with arguments that are a JSON object matching its parameters."
    )


def execute_tool(name: str, arguments: str | dict[str, Any]) -> ToolResult:
    """Run a built-in tool on a model's call. Never raises."""
    tool = BUILTIN_TOOLS.get(name)
    if tool is None:
        return ToolResult(
            f"Error: unknown tool {name!r}. Available tools: {', '.join(BUILTIN_TOOLS)}.", is_error=True
        )
    try:
        checked = check_arguments(tool.definition["function"]["parameters"], arguments)
    except ArgumentError as exc:
        shown = arguments if isinstance(arguments, str) else json.dumps(arguments, default=str)
        return ToolResult(rejected_call_result(name, shown, str(exc)), is_error=True)
    try:
        return tool.run(checked)
    except Exception as exc:  # a failing built-in must not end the agent loop
        logger.exception("built-in tool %s failed", name)
        return ToolResult(f"Error: {name} failed ({type(exc).__name__}: {exc})", is_error=True)


class ToolDefinitionError(ValueError):
    """The tool editor's JSON cannot be used; the message says what to fix and where."""


_FUNCTION_KEYS = {"name", "description", "parameters", "strict"}


def _refs(schema: Any, parts: tuple[Any, ...] = ()) -> Iterator[tuple[tuple[Any, ...], str]]:
    if isinstance(schema, dict):
        for key, value in schema.items():
            if key == "$ref" and isinstance(value, str):
                yield (*parts, key), value
            else:
                yield from _refs(value, (*parts, key))
    elif isinstance(schema, list):
        for index, value in enumerate(schema):
            yield from _refs(value, (*parts, index))


def _check_parameters(parameters: Any) -> None:
    """Raises ToolDefinitionError with a "parameters..." path for a schema the loop cannot use."""
    if not isinstance(parameters, dict):
        raise ToolDefinitionError("parameters must be a JSON Schema object")
    dialect = parameters.get("$schema", Draft202012Validator.META_SCHEMA["$id"])
    validator = validator_for({"$schema": dialect}, default=None) if isinstance(dialect, str) else None
    if validator is None:
        raise ToolDefinitionError(f"parameters.$schema: unknown dialect {dialect!r}; omit it")
    try:
        validator.check_schema(parameters)
    except SchemaError as exc:
        raise ToolDefinitionError(f"{_path(exc.path, 'parameters')}: {exc.message}") from None
    if parameters.get("type") != "object":
        raise ToolDefinitionError('parameters.type must be "object" (tool arguments are a JSON object)')
    # Nothing is fetched: a reference must point inside the schema, and exist.
    resolver = Registry().resolver_with_root(
        Resource.from_contents(parameters, default_specification=DRAFT202012)
    )
    for parts, ref in _refs(parameters):
        try:
            if not ref.startswith("#"):
                raise Unresolvable(ref)
            resolver.lookup(ref)
        except Unresolvable:
            raise ToolDefinitionError(
                f"{_path(parts, 'parameters')}: {ref!r} does not point inside this schema "
                "(use a local reference such as '#/$defs/name')"
            ) from None


def _normalize(item: Any) -> dict[str, Any]:
    if not isinstance(item, dict):
        raise ToolDefinitionError("must be a JSON object")
    if "function" in item or "type" in item:  # OpenAI form; otherwise the bare function
        if item.get("type") != "function" or not isinstance(item.get("function"), dict):
            raise ToolDefinitionError('use {"type": "function", "function": {...}} or the bare function')
        if extra := sorted(set(item) - {"type", "function"}):
            raise ToolDefinitionError(f"unexpected keys {extra}; only type and function are allowed")
        item = item["function"]
    if extra := sorted(set(item) - _FUNCTION_KEYS):
        raise ToolDefinitionError(f"unexpected keys {extra}; allowed: {sorted(_FUNCTION_KEYS)}")
    name = item.get("name")
    if not isinstance(name, str) or not TOOL_NAME.match(name):
        raise ToolDefinitionError(f"name {name!r} must be 1-64 letters, digits, _ or -")
    if "description" in item and not isinstance(item["description"], str):
        raise ToolDefinitionError("description must be a string")
    if "strict" in item and not isinstance(item["strict"], bool):
        raise ToolDefinitionError("strict must be true or false")
    function = dict(item)
    function.setdefault("parameters", {"type": "object", "properties": {}})
    return {"type": "function", "function": function}


def parse_tool_definitions(text: str) -> list[dict[str, Any]]:
    """The tool editor's JSON (an array of OpenAI-format or bare-function definitions, or one
    definition) as OpenAI-format tools. Empty text means no tools."""
    if len(text.encode()) > MAX_DEFINITIONS_BYTES:
        raise ToolDefinitionError(f"the definitions are larger than {MAX_DEFINITIONS_BYTES // 1024} KiB")
    if not text.strip():
        return []
    try:
        value = _strict_json(text)
    except ValueError as exc:
        raise ToolDefinitionError(f"invalid JSON: {exc}") from None
    items = value if isinstance(value, list) else [value]
    tools: list[dict[str, Any]] = []
    first_index: dict[str, int] = {}
    for index, item in enumerate(items, start=1):
        function = item.get("function", item) if isinstance(item, dict) else None
        name = function.get("name") if isinstance(function, dict) else None
        label = f"tool {index} ({name})" if isinstance(name, str) else f"tool {index}"
        try:
            tool = _normalize(item)
            _check_parameters(tool["function"]["parameters"])
        except ToolDefinitionError as exc:
            raise ToolDefinitionError(f"{label}: {exc}") from None
        except RecursionError:
            raise ToolDefinitionError(f"{label}: parameters are nested too deeply") from None
        name = tool["function"]["name"]
        if name in first_index:
            raise ToolDefinitionError(
                f"{label}: the name is already used by tool {first_index[name]}; rename one"
            )
        builtin = BUILTIN_TOOLS.get(name)
        if builtin is not None and tool != builtin.definition:
            raise ToolDefinitionError(
                f"{label}: {name} is a built-in tool; rename yours or paste the built-in definition unchanged"
            )
        first_index[name] = index
        tools.append(tool)
    return tools
