"""StopStringFilter over every way of splitting a text into pieces."""

from __future__ import annotations

import random

import pytest

from mlx_server.services.pipeline.engine.stop_strings import StopStringFilter


def _run(pieces: list[str], stops: list[str]) -> tuple[str, bool]:
    stop_filter = StopStringFilter(stops)
    out = "".join(stop_filter.feed(p) for p in pieces)
    return out + stop_filter.flush(), stop_filter.stopped


def _splits(text: str, rng: random.Random) -> list[str]:
    cuts = sorted(rng.sample(range(1, len(text)), rng.randint(0, len(text) - 1)))
    return [text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)], strict=True)]


@pytest.mark.parametrize(
    ("text", "stops", "expected", "stopped"),
    [
        ("The capital of France is Paris.", [" capital of"], "The", True),
        ("The capital of France is Paris.", ["Paris", "France"], "The capital of ", True),
        ("no stop here", ["STOP"], "no stop here", False),
        ("ends with a partial ST", ["STOP"], "ends with a partial ST", False),
        ("aaab", ["aab"], "a", True),
        ("<|end|> at the start", ["<|end|>"], "", True),
    ],
)
def test_any_split_gives_the_same_text_and_never_part_of_a_stop(
    text: str, stops: list[str], expected: str, stopped: bool
) -> None:
    rng = random.Random(text)
    for _ in range(200):
        assert _run(_splits(text, rng), stops) == (expected, stopped)


def test_text_that_cannot_become_a_stop_is_not_held_back() -> None:
    stop_filter = StopStringFilter(["</answer>"])
    assert stop_filter.feed("Hello <") == "Hello "
    assert stop_filter.feed("b>") == "<b>"
