"""Calls written in Python syntax: `get_weather(city="Paris")`, `[a(x=1), b()]`.

Read with `ast` and literal values only: model output is never evaluated. A truncated output
has its open strings and brackets closed before it is parsed.
"""

from __future__ import annotations

import ast
import keyword
import math
from typing import Any

from mlx_server.parsers.lenient_json import dump_json

_JSON_NAMES = {"true": True, "false": False, "null": None}
_CLOSERS = {"(": ")", "[": "]", "{": "}"}


def _scan(source: str, start: int, *, stop_at_match: bool) -> tuple[int | None, str]:
    stack: list[str] = []
    quote = ""
    i = start
    while i < len(source):
        char = source[i]
        if quote:
            if char == "\\":
                i += 1
            elif char == quote:
                quote = ""
        elif char in "\"'":
            quote = char
        elif char in _CLOSERS:
            stack.append(_CLOSERS[char])
        elif stack and char == stack[-1]:
            stack.pop()
            if not stack and stop_at_match:
                return i + 1, ""
        i += 1
    return None, quote + "".join(reversed(stack))


def bracket_end(source: str, start: int = 0) -> int | None:
    """The index just past the bracket matching the one at `start` (strings skipped); None when
    the output ended before it closed."""
    return _scan(source, start, stop_at_match=True)[0]


def leading_list(text: str, end_tokens: tuple[str, ...]) -> str | None:
    """The bracketed list a reply starts with; when truncated, up to an end-of-turn token or the
    end of the output. None when the reply does not start with `[`."""
    stripped = text.lstrip()
    if not stripped.startswith("["):
        return None
    end = bracket_end(stripped)
    if end is None:
        found = [at for at in (stripped.find(token) for token in end_tokens) if at >= 0]
        end = min(found, default=len(stripped))
    return stripped[:end]


def closers(source: str) -> str:
    """What would close the strings and brackets a truncated output left open."""
    return _scan(source, 0, stop_at_match=False)[1]


def parse_python(source: str) -> ast.Module | None:
    """`source` as a Python module, closing what a truncated output left open; None if it is not
    Python."""
    for candidate in dict.fromkeys((source, source + closers(source))):
        try:
            return ast.parse(candidate)
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            continue
    return None


def literal(node: ast.expr) -> Any:
    """A JSON value from a literal node: `ast.literal_eval` plus JSON's true/false/null, which
    models also write. Raises ValueError for anything else."""
    if isinstance(node, ast.Name) and node.id in _JSON_NAMES:
        return _JSON_NAMES[node.id]
    if isinstance(node, ast.List | ast.Tuple | ast.Set):
        return [literal(item) for item in node.elts]
    if isinstance(node, ast.Dict):
        result: dict[str, Any] = {}
        for key_node, value_node in zip(node.keys, node.values, strict=True):
            if key_node is None:
                raise ValueError("dict unpacking is not a literal")
            key = literal(key_node)
            result[key if isinstance(key, str) else dump_json(key)] = literal(value_node)
        return result
    value = ast.literal_eval(node)
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float) and math.isfinite(value):
        return value
    raise ValueError("not a JSON value")


def dotted_name(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = dotted_name(node.value)
        return f"{base}.{node.attr}" if base else None
    return None


def python_call(node: ast.expr) -> tuple[str, dict[str, Any]] | None:
    """`name(key=value, ...)` with literal values; None for anything else, positional arguments
    included (they have no parameter name to map to)."""
    if not isinstance(node, ast.Call) or node.args:
        return None
    name = dotted_name(node.func)
    if not name:
        return None
    arguments: dict[str, Any] = {}
    try:
        for kw in node.keywords:
            value = literal(kw.value)
            if kw.arg is not None:
                arguments[kw.arg] = value
            elif isinstance(value, dict):
                arguments.update(value)  # `**{"odd-key": 1}`: how keys that are not identifiers come back
            else:
                return None
    except (ValueError, TypeError, SyntaxError, RecursionError, MemoryError):
        return None
    return name, arguments


def _unwrap_print(node: ast.expr) -> ast.expr:
    """`print(get_weather(city="Paris"))`, as Gemma writes in tool_code, is the inner call."""
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == "print"
        and len(node.args) == 1
        and not node.keywords
        and isinstance(node.args[0], ast.Call)
    ):
        return node.args[0]
    return node


def python_calls(source: str, *, unwrap_print: bool = False) -> list[tuple[str, dict[str, Any]]] | None:
    """Calls written as Python: a list `[a(x=1), b()]`, or call statements one per line. All or
    nothing: None as soon as one part is not a call."""
    module = parse_python(source.strip())
    if module is None or not module.body:
        return None
    calls: list[tuple[str, dict[str, Any]]] = []
    for statement in module.body:
        if not isinstance(statement, ast.Expr):
            return None
        value = statement.value
        items = value.elts if isinstance(value, ast.List | ast.Tuple) else [value]
        if not items:
            return None
        for item in items:
            call = python_call(_unwrap_print(item) if unwrap_print else item)
            if call is None:
                return None
            calls.append(call)
    return calls


def render_python_call(name: str, arguments: dict[str, Any]) -> str:
    """`name(key=value, ...)`; keys that are not identifiers go in a `**{...}` literal. Values are
    written as the call grammars write them (python_literal), so a constrained model continues
    its own history in the same style."""
    plain = {k: v for k, v in arguments.items() if is_keyword_name(k)}
    parts = [f"{key}={python_literal(value)}" for key, value in plain.items()]
    rest = {k: v for k, v in arguments.items() if k not in plain}
    if rest:
        parts.append(f"**{python_literal(rest)}")
    return f"{name}({', '.join(parts)})"


def is_keyword_name(name: str) -> bool:
    """Whether `name` can be written as `name=value` in a Python call."""
    return name.isidentifier() and not keyword.iskeyword(name)


def python_literal(value: Any) -> str:
    """`value` as a Python literal the way the call grammars write it: strings in double quotes
    (JSON's escapes, which mean the same in Python), True/False/None."""
    if value is None or isinstance(value, bool):
        return repr(value)
    if isinstance(value, str):
        text = dump_json(value)
        return repr(value) if any("\ud800" <= char <= "\udfff" for char in value) else text
    if isinstance(value, int | float):
        return dump_json(value) if isinstance(value, int) or math.isfinite(value) else repr(value)
    if isinstance(value, list | tuple):
        return "[" + ", ".join(python_literal(item) for item in value) + "]"
    if isinstance(value, dict):
        items = (f"{python_literal(str(key))}: {python_literal(item)}" for key, item in value.items())
        return "{" + ", ".join(items) + "}"
    return repr(value)
