"""Values cut to a size before they are stored or shown, saying what was cut.

Whatever a client sends ends up somewhere (an audit row, a page, an export); the schemas bound
what they read, and these bound everything on its way to a row or a page, so no single value
can grow the database or a page without limit, and a reader sees that something was cut.
"""

from __future__ import annotations

import json
from itertools import islice
from typing import Any


def clip(text: str, limit: int) -> str:
    """`text`, or its first characters and a marker saying how many more there were, in at
    most `limit` characters."""
    if len(text) <= limit:
        return text
    marker = f"… [{len(text)} characters in all]"
    return text[: max(0, limit - len(marker))] + marker


def bounded(value: Any, text_limit: int = 256, items: int = 32, depth: int = 4) -> Any:
    """A JSON value with every string clipped to `text_limit`, every list and object cut to
    `items` entries (then a marker entry), and anything nested deeper than `depth` written as
    clipped JSON text."""
    if isinstance(value, str):
        return clip(value, text_limit)
    if not isinstance(value, (list, dict)):
        return value
    if depth <= 0:
        return clip(json.dumps(value, ensure_ascii=False, default=str), text_limit)
    if isinstance(value, list):
        kept = [bounded(item, text_limit, items, depth - 1) for item in value[:items]]
        return kept + ([f"… [{len(value)} items in all]"] if len(value) > items else [])
    kept_dict = {
        clip(str(k), text_limit): bounded(v, text_limit, items, depth - 1)
        for k, v in islice(value.items(), items)
    }
    if len(value) > items:
        kept_dict["…"] = f"[{len(value)} entries in all]"
    return kept_dict
