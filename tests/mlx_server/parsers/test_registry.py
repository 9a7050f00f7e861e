"""Every registered parser keeps the contract's promises on hostile output."""

from __future__ import annotations

import pytest

from mlx_server.parsers.registry import (
    THINKING_PARSERS,
    TOOL_PARSERS,
    resolve_thinking_parser,
    resolve_tool_parser,
)

HOSTILE = [
    "{" * 3_000,
    "[" * 3_000 + "]" * 3_000,
    '<tool_call>{"name": "f", "arguments": ' + '{"a": ' * 2_000 + "1" + "}" * 2_000 + "}</tool_call>",
    "\x00\ud7ff\ufffd" * 100,
]


@pytest.mark.parametrize("parser_id", sorted(TOOL_PARSERS))
def test_extract_never_raises_on_hostile_output(parser_id: str) -> None:
    parser = TOOL_PARSERS[parser_id]()
    for text in HOSTILE:
        calls = parser.extract(text)
        assert isinstance(calls, list)
        for marker, end in parser.stream_markers:
            assert isinstance(parser.extract(marker + text + end), list)


def test_unknown_ids_name_the_known_ones() -> None:
    with pytest.raises(KeyError, match="hermes_json"):
        resolve_tool_parser("hermes")
    with pytest.raises(KeyError, match="think_tag"):
        resolve_thinking_parser("thinking")


def test_each_id_is_its_class_attribute() -> None:
    # The id the database stores is readable from the class, without an instance.
    for registry in (TOOL_PARSERS, THINKING_PARSERS):
        assert {parser_id: cls.parser_id for parser_id, cls in registry.items()} == {
            parser_id: parser_id for parser_id in registry
        }
        # Set on each class itself: a subclass (glm47 of glm4_native) does not inherit an id.
        assert all("parser_id" in vars(cls) for cls in registry.values())
