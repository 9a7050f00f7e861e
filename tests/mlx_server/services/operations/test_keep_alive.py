"""keep_alive values as Ollama's clients send them: numbers of seconds and Go-style durations."""

from __future__ import annotations

import math

import pytest

from mlx_server.errors import APIError
from mlx_server.services.operations.keep_alive import parse_keep_alive


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        (None, None),
        (0, 0.0),
        (300, 300.0),
        (2.5, 2.5),
        ("0", 0.0),
        ("90", 90.0),
        ("5m", 300.0),
        ("1h30m", 5400.0),
        ("1.5h", 5400.0),
        ("300ms", 0.3),
        (" 10s ", 10.0),
        (-1, math.inf),
        ("-1", math.inf),
        ("-1m", math.inf),
    ],
)
def test_durations_become_seconds_and_negative_keeps_loaded(
    value: float | str | None, seconds: float | None
) -> None:
    assert parse_keep_alive(value) == seconds


@pytest.mark.parametrize("value", ["soon", "5 minutes", "m5", "5d", "", "nan"])
def test_anything_else_is_a_400_saying_what_to_send(value: str) -> None:
    with pytest.raises(APIError) as refused:
        parse_keep_alive(value)
    assert refused.value.status == 400 and refused.value.param == "keep_alive"
    assert '"5m"' in refused.value.message and "-1 keeps it loaded" in refused.value.message
