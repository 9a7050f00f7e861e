"""The one lenient JSON reader every parser uses, and the arguments of calls read with it.

Quantized models write almost-JSON: single quotes, trailing commas, code fences, an unclosed
brace, arguments as a JSON string holding the object. Text is read strictly first and through
`json_repair` only when that fails, and only when it starts like an object or an array, so prose
is never turned into a call. NaN and Infinity (not JSON: clients json.loads the arguments
strictly) become null.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable
from typing import Any

from json_repair import loads as repair_loads

from mlx_server.schemas.openai import ToolCall

# A fence around the whole text: its closing line may be missing (output cut short).
_FENCE_RE = re.compile(r"\A```[\w.+-]*[ \t]*\n?(.*?)(?:\n?[ \t]*```)?\s*\Z", re.DOTALL)


def _reject_constant(token: str) -> Any:
    raise ValueError(f"not JSON: {token}")


_DECODER = json.JSONDecoder(parse_constant=_reject_constant)


def strict_loads(text: str) -> Any:
    """`json.loads` that also refuses NaN/Infinity; raises ValueError (RecursionError for
    nesting deeper than the stack)."""
    return json.loads(text, parse_constant=_reject_constant)


def finite(value: Any) -> Any:
    """`value` with NaN/Infinity (which json_repair lets through) replaced by null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {key: finite(item) for key, item in value.items()}
    if isinstance(value, list):
        return [finite(item) for item in value]
    return value


def strip_fence(text: str) -> str:
    """The inside of a markdown code fence wrapping the whole text (closed or not), else the text."""
    stripped = text.strip()
    if not stripped.startswith("```"):
        return stripped
    match = _FENCE_RE.match(stripped)
    return match.group(1).strip() if match else stripped


def repair(text: str) -> Any:
    """The object or array json_repair recovers from `text` (which must start like one), else None."""
    if not text.startswith(("{", "[")):
        return None  # json_repair would find "objects" in prose
    try:
        value = repair_loads(text)
    except Exception:  # json_repair is best effort; any failure means "not JSON"
        return None
    return finite(value) if isinstance(value, dict | list) else None


def loads_lenient(text: str) -> Any:
    """`text` (a code fence around it dropped) as strict JSON (any value); several values one
    after another as a list of them (two calls in one block: json_repair would take the second
    object for a correction of the first); else what `repair` recovers; else None."""
    body = strip_fence(text)
    if not body:
        return None
    try:
        return finite(strict_loads(body))
    except ValueError:
        pass
    except RecursionError:  # nesting deeper than the stack: no call anyone could run
        return None
    several = leading_json_values(body, separators=",")
    if len(several) > 1 and several[-1][1] == len(body):
        return [value for value, _ in several]
    return repair(body)


def skip_space(text: str, pos: int) -> int:
    while pos < len(text) and text[pos].isspace():
        pos += 1
    return pos


def strict_json_at(text: str, pos: int) -> tuple[Any, int] | None:
    """The well-formed JSON value at `pos` (after spaces) and where it ends; None if there is none."""
    try:
        value, end = _DECODER.raw_decode(text, skip_space(text, pos))
    except (ValueError, RecursionError):
        return None
    return finite(value), end


def leading_json_values(text: str, separators: str = ";,") -> list[tuple[Any, int]]:
    """The well-formed objects and arrays at the start of `text`, each with where it ends
    (several may follow one another, separated by whitespace or one of `separators`)."""
    values: list[tuple[Any, int]] = []
    pos = 0
    while True:
        while pos < len(text) and (text[pos].isspace() or (values and text[pos] in separators)):
            pos += 1
        if pos >= len(text) or text[pos] not in "{[":
            return values
        decoded = strict_json_at(text, pos)
        if decoded is None:
            return values
        values.append(decoded)
        pos = decoded[1]


def arguments_object(value: Any) -> dict[str, Any] | None:
    """Call arguments as an object: given as one, as JSON text (a common slip, even quoted once
    more: "{\\"city\\": ...}"), or absent (= {}); None when they are not an object."""
    if value is None:
        return {}
    if isinstance(value, str):
        if not strip_fence(value):
            return {}
        value = loads_lenient(value)
        if isinstance(value, str):
            value = loads_lenient(value) if strip_fence(value) else {}
    return value if isinstance(value, dict) else None


def call_arguments(call: ToolCall) -> dict[str, Any]:
    """A canonical call's arguments as a dict, for rendering it back in a model's format."""
    arguments = arguments_object(call.function.arguments)
    return arguments if arguments is not None else {}


def dump_json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


def decode_value(raw: str) -> Any:
    """A parameter written as raw text (the tagged formats): its JSON value when it is JSON
    (numbers, booleans, null, objects, arrays, quoted strings), else the text unchanged."""
    text = raw.strip()
    if not text:
        return raw
    try:
        return finite(strict_loads(text))
    except (ValueError, RecursionError):
        pass
    if (text[0], text[-1]) in (("{", "}"), ("[", "]")):
        repaired = repair(text)
        if repaired is not None:
            return repaired
    return raw


def raw_arguments(pairs: Iterable[tuple[str, str]]) -> dict[str, Any]:
    """Arguments written as (name, raw text) pairs, each value read by `decode_value`; pairs
    without a name are left out."""
    return {key.strip(): decode_value(value) for key, value in pairs if key.strip()}


def encode_value(value: Any) -> str:
    """Inverse of `decode_value`: a string raw unless it would read back as something else."""
    if isinstance(value, str):
        decoded = decode_value(value)
        if isinstance(decoded, str) and decoded == value:
            return value
    return dump_json(value)
