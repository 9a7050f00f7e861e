"""How much one request may ask for, checked while validating it (a clear 400, not a stalled
server): messages, tools, and the size of each tool's definition. The body limit
(`MLX_SERVER_MAX_BODY_BYTES`, api/request_guard.py) bounds everything else; response_format
schemas have their own 64 KiB limit (services/pipeline/constraints.py)."""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel

MAX_MESSAGES = 10_000
MAX_TOOLS = 512
MAX_TOOL_BYTES = 64 * 1024  # one tool definition (name, description, input schema) as JSON


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
