"""Python-call and JSON call reading (python_calls.py, lenient_json.py) as the Llama, Mistral,
pythonic and Gemma parsers use it: literals only, never evaluated; arbitrary and deeply nested
text read without a crash."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.mlx_server.parsers.test_llama_mistral import PARSERS, calls_of, named_args


@pytest.mark.parametrize(
    "text",
    [
        '[__import__("os").system("touch /tmp/pwned")]',
        '[get_weather(city=__import__("os").getcwd())]',
        "[get_weather(city=open('/etc/passwd').read())]",
        "[get_weather(**kwargs)]",
        "[get_weather(city=1 + 2j)]",
    ],
)
def test_pythonic_reads_literals_only_and_never_evaluates(text: str) -> None:
    assert PARSERS["pythonic"].extract(text) == []


def test_pythonic_keeps_keys_that_are_not_identifiers() -> None:
    parser = PARSERS["pythonic"]
    calls = calls_of([("set", {"content-type": "json", "class": 1, "ok": True})])
    rendered = parser.render_calls(calls)
    assert rendered == '[set(ok=True, **{"content-type": "json", "class": 1})]'
    assert named_args(parser.extract(rendered)) == [("set", {"ok": True, "content-type": "json", "class": 1})]


FRAGMENTS = [
    "<function=",
    "get_weather>",
    "</function>",
    "<|python_tag|>",
    "<|eom_id|>",
    "[TOOL_CALLS]",
    "[ARGS]",
    "[CALL_ID]",
    "<|python_start|>",
    "<|python_end|>",
    "<|tool_call>",
    "<tool_call|>",
    "call:f{",
    '<|"|>',
    "```tool_code\n",
    "```",
    "brave_search.call(query=",
    '{"name": "f", "arguments": ',
    '{"a": [1, {"b": "c"}]}',
    "[g(x=1), ",
    "(",
    ")",
    "[",
    "]",
    "{",
    "}",
    ":",
    ",",
    '"',
    "'",
    "\\",
    "\n",
    "Zürich 🌸",
]


@settings(max_examples=300, deadline=None)
@given(pieces=st.lists(st.one_of(st.sampled_from(FRAGMENTS), st.text(max_size=8)), max_size=16))
def test_extract_never_raises_on_arbitrary_fragments(pieces: list[str]) -> None:
    text = "".join(pieces)
    for parser in PARSERS.values():
        for call in parser.extract(text):
            assert call.function.name
            assert isinstance(json.loads(call.function.arguments), dict)


def _calls_with_nested_argument(depth: int) -> dict[str, str]:
    """A call to `f` whose argument `a` is `depth` nested lists, in each format's syntax."""
    nested = "[" * depth + "]" * depth
    return {
        "function tag": f'<function=f>{{"a": {nested}}}</function>',
        "mistral": f'[TOOL_CALLS]f[ARGS]{{"a": {nested}}}',
        "python list": f"[f(a={nested})]",
        "python tag": f"<|python_tag|>f(a={nested})",
        "gemma": f"<|tool_call>call:f{{a:{nested}}}<tool_call|>",
    }


# The forms of the texts above each parser reads.
OWN_FORMS = {
    "llama_xml": {"function tag", "python tag"},
    "llama_python": {"python tag"},
    "mistral": {"mistral"},
    "pythonic": {"python list"},
    "gemma4": {"python list", "gemma"},
}


def _nested_lists(depth: int) -> list[object]:
    value: list[object] = []
    for _ in range(depth - 1):
        value = [value]
    return value


@pytest.mark.parametrize("parser_id", PARSERS)
def test_deep_nesting_is_not_a_crash(parser_id: str) -> None:
    parser = PARSERS[parser_id]
    # Nesting a stack can hold is read as written, in the parser's own forms and only there.
    for form, text in _calls_with_nested_argument(20).items():
        expected = [("f", {"a": _nested_lists(20)})] if form in OWN_FORMS[parser_id] else []
        assert named_args(parser.extract(text)) == expected, form
    # Deeper than Python's stack (and a Gemma object cut short at that depth): no call anyone
    # could run, so none, and no exception.
    depth = 5000
    deep = [*_calls_with_nested_argument(depth).values(), "<|tool_call>call:f{a:" + "{a:" * depth]
    assert [parser.extract(text) for text in deep] == [[]] * len(deep)
