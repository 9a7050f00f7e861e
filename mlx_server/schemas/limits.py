"""How much one request may ask for, checked while validating it (a clear 400, not a stalled
server): messages, tools, the size of each tool's definition, and the length of every string
the server stores, logs, uses as a metrics label or echoes (model names, stop strings, tool and
function names, client ids, user fields). The body limit (`MLX_SERVER_MAX_BODY_BYTES`,
api/request_guard.py) bounds everything else; response_format schemas have their own 64 KiB
limit (services/pipeline/engine/constraints.py).

Text must also be text: JSON's `\\ud800` escapes can put a lone UTF-16 surrogate into a Python
string, which no tokenizer, database or UTF-8 response can carry. `TextOnly` refuses one with a
400 naming the field, on every request body that reaches the engine or the database.
"""

from __future__ import annotations

import json
import re
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ValidationError, model_validator
from pydantic_core import InitErrorDetails, PydanticCustomError

MAX_MESSAGES = 10_000
MAX_TOOLS = 512
MAX_TOOL_BYTES = 64 * 1024  # one tool definition (name, description, input schema) as JSON
# A model as a request names it: a local id, an alias, `backend/model`, `base+adapter`, `id:tag`.
MAX_MODEL_NAME_CHARS = 256
# Tool and function names (Anthropic allows 128; OpenAI's Responses API 64, kept there).
MAX_NAME_CHARS = 128
# Ids a client chooses and the server echoes or stores: tool call ids, item ids, response ids.
MAX_ID_CHARS = 256
MAX_USER_CHARS = 256  # OpenAI's `user`, Anthropic's `metadata.user_id`
MAX_STOP_CHARS = 1024  # one stop string
MAX_STOP_SEQUENCES = 16  # Anthropic's and Ollama's lists (OpenAI's own limit is 4)
# mlx's PRNG key takes an unsigned 64-bit seed.
MAX_SEED = 2**64 - 1


def _header_token(value: str) -> str:
    if not all("\x21" <= c <= "\x7e" for c in value):
        raise ValueError("an API key is printable ASCII without spaces: it is sent in an HTTP header")
    return value


# A key this server sends to another one (Authorization: Bearer ...): an accented letter or a space
# there is no header at all, so it is refused when given, not when first sent.
HeaderToken = Annotated[str, AfterValidator(_header_token)]

_SURROGATE = re.compile("[\ud800-\udfff]")
_TEXTUAL = frozenset({str, list, dict})


def check_tool_sizes(tools: list[Any] | None) -> list[Any] | None:
    """`tools`, unless one definition is larger than MAX_TOOL_BYTES as JSON."""
    for index, tool in enumerate(tools or []):
        definition = tool.model_dump(exclude_none=True) if isinstance(tool, BaseModel) else tool
        size = len(json.dumps(definition, default=str))
        if size > MAX_TOOL_BYTES:
            raise ValueError(
                f"tool {index} is {size} bytes as JSON, over the {MAX_TOOL_BYTES} a tool may have; "
                "shorten its description or schema"
            )
    return tools


def check_stop_strings(stops: list[str], most: int) -> None:
    """At most `most` stop strings, none empty, none longer than MAX_STOP_CHARS."""
    if len(stops) > most:
        raise ValueError(f"at most {most} stop sequences are allowed, got {len(stops)}")
    if any(s == "" for s in stops):
        raise ValueError("stop sequences must not be empty")
    longest = max((len(s) for s in stops), default=0)
    if longest > MAX_STOP_CHARS:
        raise ValueError(f"a stop sequence may have at most {MAX_STOP_CHARS} characters, got {longest}")


def check_name_length(name: object, what: str) -> None:
    if isinstance(name, str) and len(name) > MAX_NAME_CHARS:
        raise ValueError(f"{what} may have at most {MAX_NAME_CHARS} characters, got {len(name)}")


def lone_surrogate(value: Any) -> tuple[tuple[str | int, ...], int, str] | None:
    """Where the first lone surrogate in a parsed JSON value is: (path, index in the string,
    the code point as `\\udXXX`), or None. Dict keys count as text too. Only strings and
    containers are looked into, so numbers cost a type check each (a body of a million token
    ids takes about what validating them takes), and an ASCII string one C call."""
    kind = type(value)
    if kind is str:
        found = None if value.isascii() else _SURROGATE.search(value)
        return None if found is None else ((), found.start(), f"\\u{ord(found.group()):04x}")
    if kind is list:
        for index, child in enumerate(value):
            child_kind = type(child)
            if child_kind is str and child.isascii():
                continue
            if child_kind in _TEXTUAL and (inner := lone_surrogate(child)) is not None:
                return (index, *inner[0]), inner[1], inner[2]
    elif kind is dict:
        for key, child in value.items():
            if type(key) is str and (in_key := lone_surrogate(key)) is not None:
                return (_printable(key), *in_key[0]), in_key[1], in_key[2]
            if type(child) in _TEXTUAL and (inner := lone_surrogate(child)) is not None:
                return (_printable(key), *inner[0]), inner[1], inner[2]
    return None


def _printable(key: object) -> str:
    """A dict key as an error may show it (a surrogate escaped, never sent raw)."""
    return str(key).encode("utf-8", "backslashreplace").decode("utf-8")


class TextOnly(BaseModel):
    """A request body whose strings must be valid Unicode text: a lone surrogate anywhere is a
    400 naming where (`messages[0].content`), before any field is read."""

    @model_validator(mode="before")
    @classmethod
    def _no_lone_surrogates(cls, data: Any) -> Any:
        found = lone_surrogate(data)
        if found is None:
            return data
        path, index, escape = found
        error = PydanticCustomError(
            "lone_surrogate",
            "the text has a lone UTF-16 surrogate ({escape}) at character {index}, which is not a "
            "character; a \\ud800-\\udbff escape must be followed by a \\udc00-\\udfff one",
            {"escape": escape, "index": index},
        )
        raise ValidationError.from_exception_data(
            cls.__name__, [InitErrorDetails(type=error, loc=path, input=escape)]
        )
