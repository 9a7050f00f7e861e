"""Ollama's `keep_alive`: how long a model stays loaded after a request, per model.

A number is seconds, a string a Go-style duration ("5m", "1h30m", "300ms") or a number; a
negative value keeps the model loaded, 0 unloads it once the request is done. The value of
the latest request that sent one holds for that model (as in Ollama); a request without one
leaves the model on the pool's idle TTL or its earlier keep_alive. A model pinned on the
dashboard stays pinned whatever a client sends. The idle sweep runs at most a minute apart,
so a finite keep_alive unloads within a minute of expiring; 0 unloads at once.
"""

from __future__ import annotations

import math
import re
from typing import Literal

from mlx_server.errors import APIError
from mlx_server.models.detection import ModelType
from mlx_server.models.pool import get_model_pool

_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
_DURATION = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h)")
HINT = (
    'Send a number of seconds or a duration like "5m" or "1h30m": 0 unloads the model after the '
    "request, -1 keeps it loaded."
)


def _duration(text: str) -> float | None:
    sign = -1.0 if text.startswith("-") else 1.0
    body = text.lstrip("+-")
    try:
        return sign * float(body)
    except ValueError:
        pass
    parts = _DURATION.findall(body)
    if not parts or "".join(n + u for n, u in parts) != body:
        return None
    return sign * sum(float(number) * _UNITS[unit] for number, unit in parts)


def parse_keep_alive(value: float | str | None) -> float | None:
    """Seconds to stay loaded when idle (math.inf: keep loaded), or None when not given."""
    if value is None:
        return None
    seconds = float(value) if isinstance(value, int | float) else _duration(value.strip())
    if seconds is None or math.isnan(seconds):
        raise APIError(400, f"keep_alive {value!r} is not a duration. {HINT}", param="keep_alive")
    return math.inf if seconds < 0 else seconds


async def apply_keep_alive(model_id: str, seconds: float | None) -> bool:
    """Set the model's keep_alive after a request; 0 unloads it now unless another request is
    using it (the sweep then takes it) or it is pinned. Whether it was unloaded."""
    pool = get_model_pool()
    loaded = pool.get_loaded(model_id)
    if seconds is None or loaded is None:
        return False
    loaded.keep_alive_s = seconds
    if seconds > 0 or loaded.pinned or loaded.active:
        return False
    await pool.unload(model_id)
    return True


async def load_or_unload(model_id: str, seconds: float | None) -> Literal["load", "unload"]:
    """A request with nothing to generate: loads the model (Ollama's preload), or with a
    keep_alive of 0 unloads it. Ollama's done_reason: "load" or "unload" ("load" when a
    dashboard pin keeps it loaded)."""
    pool = get_model_pool()
    if seconds == 0:
        loaded = pool.get_loaded(model_id)
        if loaded is not None:
            await apply_keep_alive(model_id, seconds)
        return "load" if loaded is not None and loaded.pinned else "unload"
    await pool.preload(model_id, pin=False)
    await apply_keep_alive(model_id, seconds)
    return "load"


async def warm(model_id: str, model_type: ModelType) -> None:
    """Load the model now if it is not (checking its type first), so a request can time its load."""
    async with get_model_pool().lease(model_id, model_type):
        pass
