"""The one lenient JSON reader (lenient_json.py): raw parameter values, non-finite numbers,
fences, prose."""

from __future__ import annotations

from typing import Any

import pytest

from mlx_server.parsers.lenient_json import arguments_object, decode_value, encode_value, loads_lenient


@pytest.mark.parametrize(
    ("raw", "value"),
    [
        ("Paris", "Paris"),
        ("42", 42),
        ("-1.5e3", -1500.0),
        ("true", True),
        ("null", None),
        ('"42"', "42"),
        ('{"a": [1, 2]}', {"a": [1, 2]}),
        ("{'a': 1,}", {"a": 1}),
        ("[1, 2,]", [1, 2]),
        ("[WIP] fix the build", "[WIP] fix the build"),
        ("02134", "02134"),
        ("NaN", "NaN"),
        ("True", "True"),
        ("", ""),
        ("  spaced  ", "  spaced  "),
    ],
)
def test_decode_value(raw: str, value: Any) -> None:
    assert decode_value(raw) == value
    assert decode_value(encode_value(value)) == value


def test_lenient_json_never_yields_non_finite_numbers() -> None:
    assert loads_lenient('{"a": NaN, "b": [Infinity]}') == {"a": None, "b": [None]}
    assert loads_lenient("just prose, no JSON here") is None
    assert loads_lenient('```json\n{"a": 1}\n```') == {"a": 1}


# --- Call grammars of the tagged-parameter formats (the generic checks: test_call_grammars.py) ---


def test_one_reader_with_one_set_of_rules_for_every_format() -> None:
    # Repaired only when it starts like an object or an array: prose never becomes a call.
    assert loads_lenient("The answer is {'a': 1}") is None
    assert loads_lenient("{'city': 'Paris',}") == {"city": "Paris"}
    # A fence is dropped, closed or not (the output may be cut before its end).
    assert loads_lenient('```json\n{"a": 1}') == {"a": 1}
    # Two values back to back are two values, not a correction of the first.
    assert loads_lenient('{"a": 1}\n{"a": 2}') == [{"a": 1}, {"a": 2}]
    # Deeper than the stack: not JSON anyone could use.
    assert loads_lenient("[" * 5000 + "]" * 5000) is None


def test_arguments_are_an_object_given_as_one_as_text_or_absent() -> None:
    assert arguments_object(None) == {}
    assert arguments_object("  ") == {}
    assert arguments_object({"city": "Paris"}) == {"city": "Paris"}
    assert arguments_object('"{\\"city\\": \\"Paris\\"}"') == {"city": "Paris"}
    assert arguments_object("```json\n{'city': 'Paris'}\n```") == {"city": "Paris"}
    assert arguments_object("[1, 2]") is None
    assert arguments_object("Paris") is None
