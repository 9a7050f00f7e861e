"""Calls written as JSON objects (`{"name": ..., "arguments"|"parameters": ...}`) and the
function names the formats accept."""

from __future__ import annotations

import re
from typing import Any

from mlx_server.parsers.base import make_tool_call
from mlx_server.parsers.lenient_json import arguments_object, leading_json_values, loads_lenient
from mlx_server.schemas.openai import ToolCall

# A function name: no spaces, starts and ends with a word character (so prose such as "tags." or
# "the call" right after an opening tag is not taken for a name); dots, colons, slashes and
# dashes inside allow namespaced tools ("github.search", "mcp:files/read").
_NAME_RE = re.compile(r"\w(?:[\w.:/-]*\w)?")
# A name where a tag or a Python call holds it (Llama, Mistral, Gemma): an identifier,
# optionally dotted or dashed.
NAME_RE = re.compile(r"[A-Za-z_][\w.\-]*")
# A name in a header of a token format (DeepSeek, Kimi, harmony): anything but spaces, brackets
# and quotes (a.b, mcp__x, tool-name); never prose.
_HEADER_NAME_RE = re.compile(r"[^\s<>{}\[\]()\"',`]{1,256}")


def valid_name(name: str) -> bool:
    return len(name) <= 256 and _NAME_RE.fullmatch(name) is not None


def clean_name(name: str) -> str | None:
    """A name from a format's header, stripped of spaces and quotes; None unless it looks like one."""
    name = name.strip().strip("`\"'")
    return name if _HEADER_NAME_RE.fullmatch(name) else None


def call_from_object(obj: Any, *, require_arguments: bool = True) -> ToolCall | None:
    """A call from {"name": ..., "arguments"|"parameters": ...} (or OpenAI's {"function": {...}}).
    With `require_arguments`, an object without either key is no call: an ordinary JSON answer
    with a "name" field must stay content."""
    if not isinstance(obj, dict):
        return None
    if "name" not in obj and isinstance(obj.get("function"), dict):
        obj = obj["function"]
    name = obj.get("name")
    if not isinstance(name, str) or not valid_name(name.strip()):
        return None
    key = next((k for k in ("arguments", "parameters") if k in obj), None)
    if key is None and require_arguments:
        return None
    arguments = arguments_object(obj[key] if key else None)
    return None if arguments is None else make_tool_call(name.strip(), arguments)


def calls_from_json(
    value: Any, *, require_arguments: bool = True, all_or_none: bool = False
) -> list[ToolCall]:
    """Calls from one JSON value: an object, or an array of objects. `all_or_none`: a list with
    anything that is not a call gives no call at all."""
    items = value if isinstance(value, list) else [value]
    calls = [call_from_object(item, require_arguments=require_arguments) for item in items]
    if all_or_none and (not calls or any(call is None for call in calls)):
        return []
    return [call for call in calls if call is not None]


def json_calls(text: str) -> list[ToolCall]:
    """Calls written as JSON at the start of `text` (all or none): the well-formed values there
    first, then one lenient read of the whole."""
    values = leading_json_values(text)
    calls = [call for value, _ in values for call in calls_from_json(value, all_or_none=True)]
    return calls or calls_from_json(loads_lenient(text), all_or_none=True)
