"""BeamState, the search of beam_search.py, stepped on log probabilities written by hand (the
decoder's are the acceptance test's, test_transcription_beams.py)."""

from __future__ import annotations

import math

import mlx.core as mx

from mlx_server.services.transcription.beam_search import BeamState

A, B, EOT = 0, 1, 2  # two text tokens and the end of the text
PROMPT = [7]  # the start-of-transcript sequence; sampling begins after it


def _logprobs(*rows: list[float]) -> mx.array:
    return mx.log(mx.array(rows))


def _search(patience: float) -> BeamState:
    """Greedy takes A (0.55) and then ends (0.37); B (0.44) ends at once with 0.96."""
    state = BeamState(beam_size=2, wanted=round(2 * patience), live=[PROMPT], sums=[0.0])
    assert state.advance(_logprobs([0.55, 0.44, 0.01]), EOT, len(PROMPT)) == [0, 0]
    assert state.live == [[7, A], [7, B]] and not state.done
    state.advance(_logprobs([0.32, 0.31, 0.37], [0.02, 0.02, 0.96]), EOT, len(PROMPT))
    return state


def test_beams_find_the_likelier_text_greedy_misses() -> None:
    state = _search(patience=1.0)
    assert state.done and set(state.finished) == {(B,), (A,)}
    tokens, total = state.best(len(PROMPT))
    assert tokens == [B] and math.isclose(total, math.log(0.44) + math.log(0.96), rel_tol=1e-5)


def test_patience_keeps_searching_until_more_texts_have_ended() -> None:
    state = _search(patience=2.0)
    assert not state.done and state.live == [[7, A, A], [7, A, B]]
    assert state.best(len(PROMPT))[0] == [B]  # what is finished still wins over longer guesses
