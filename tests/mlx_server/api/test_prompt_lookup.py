"""Prompt lookup through the real openai SDK on SmolLM2 (#33): a reply that repeats its prompt is
drafted from it, and the client gets exactly what one-token-at-a-time decoding gives (greedy
text, a seeded sample, logprobs, penalties, a stop string inside an accepted draft), with the
drafted share in usage; OpenAI's `prediction` is a source of drafts too; `prompt_lookup: 0`, a
model default of 0 and a grammar switch it off; a stream that is joined by another midway moves
into the batch and stays the same; requests batched together are drafted in the batch, with the
same guarantees."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
from fastapi.testclient import TestClient

from mlx_server.models.store import DEFAULT_MODEL_ID
from tests.mlx_server.api.conftest import standalone_server

# SmolLM2 goes on counting: " 6, 7, 8, ...", every token of it earlier in the prompt.
COUNT = "1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 1, 2, 3, 4, 5,"
OFF = {"prompt_lookup": 0}


def _complete(oai: openai.OpenAI, extra: dict[str, Any] | None = None, **options: Any) -> Any:
    fields = {"prompt": COUNT, "temperature": 0, "max_tokens": 12, **options}
    return oai.completions.create(model=DEFAULT_MODEL_ID, extra_body=extra, **fields)


def _drafted(reply: Any) -> int:
    details = reply.usage.completion_tokens_details
    return int(details.accepted_prediction_tokens) if details else 0


def test_a_counting_reply_is_drafted_from_the_prompt_and_decodes_the_same(oai: openai.OpenAI) -> None:
    looked_up, plain = _complete(oai, logprobs=2), _complete(oai, OFF, logprobs=2)
    assert looked_up.choices[0].text == plain.choices[0].text == " 6, 7, 8, 9,"
    assert _drafted(looked_up) >= 6 and _drafted(plain) == 0
    assert looked_up.usage.completion_tokens == plain.usage.completion_tokens
    ours, theirs = looked_up.choices[0].logprobs, plain.choices[0].logprobs
    assert ours.tokens == theirs.tokens
    assert ours.token_logprobs == pytest.approx(theirs.token_logprobs, abs=1e-3)
    assert [list(top) for top in ours.top_logprobs] == [list(top) for top in theirs.top_logprobs]


def test_a_seeded_sample_and_a_stop_string_inside_a_draft_are_what_plain_decoding_gives(
    oai: openai.OpenAI,
) -> None:
    for options in ({"temperature": 1.2, "seed": 11}, {"stop": [" 9,"]}, {"frequency_penalty": 0.4}):
        looked_up, plain = _complete(oai, **options), _complete(oai, OFF, **options)
        assert looked_up.choices[0].text == plain.choices[0].text, options
        assert _drafted(looked_up) > 0, options
        # Tokens drafted past the stop string never reach the client, nor its usage.
        assert _drafted(looked_up) <= looked_up.usage.completion_tokens == plain.usage.completion_tokens
        if "stop" in options:
            assert plain.choices[0].text == " 6, 7, 8,"


def test_a_predicted_reply_is_a_source_of_drafts(oai: openai.OpenAI) -> None:
    def haiku(**options: Any) -> Any:
        question = [{"role": "user", "content": "Write a haiku about the sea."}]
        return oai.chat.completions.create(
            model=DEFAULT_MODEL_ID, messages=question, temperature=0, max_tokens=20, **options
        )

    plain = haiku()
    text = plain.choices[0].message.content
    predicted = haiku(prediction={"type": "content", "content": text})
    assert predicted.choices[0].message.content == text
    assert _drafted(predicted) >= 12 > _drafted(plain)


def test_a_grammar_decodes_without_lookup_and_stays_valid(oai: openai.OpenAI) -> None:
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    reply = oai.chat.completions.create(
        model=DEFAULT_MODEL_ID,
        messages=[{"role": "user", "content": f"Give the next number as JSON: {COUNT}"}],
        response_format={"type": "json_schema", "json_schema": {"name": "n", "schema": schema}},
        temperature=0,
        max_tokens=12,
    )
    assert reply.choices[0].message.content.startswith('{"n": ')
    assert _drafted(reply) == 0 and reply.usage.completion_tokens_details is None


@pytest.fixture
def api(smollm_dir: Path) -> Iterator[TestClient]:
    with standalone_server({"smol": smollm_dir}) as client:
        yield client


def test_a_model_default_of_zero_turns_it_off_and_a_request_turns_it_back_on(api: TestClient) -> None:
    def drafted(**fields: Any) -> int:
        body = {"model": "smol", "prompt": COUNT, "temperature": 0, "max_tokens": 8, **fields}
        usage = api.post("/v1/completions", json=body).json()["usage"]
        return int((usage.get("completion_tokens_details") or {}).get("accepted_prediction_tokens", 0))

    assert drafted() > 0
    assert api.patch("/v1/admin/models/smol/defaults", json={"prompt_lookup": 0}).status_code == 200
    assert drafted() == 0
    assert drafted(prompt_lookup=4) > 0
    refused = api.post("/v1/completions", json={"model": "smol", "prompt": COUNT, "prompt_lookup": 99})
    assert refused.status_code == 400 and "prompt_lookup" in refused.text


def test_a_drafting_stream_joined_midway_keeps_its_text(oai: openai.OpenAI) -> None:
    alone = _complete(oai, max_tokens=24).choices[0].text
    other_alone = _complete(oai, OFF, max_tokens=4, prompt="The sky is").choices[0].text
    pieces: list[str] = []
    joined = threading.Event()
    other: list[str] = []

    def join() -> None:
        joined.wait(60)
        other.append(_complete(oai, OFF, max_tokens=4, prompt="The sky is").choices[0].text)

    thread = threading.Thread(target=join)
    thread.start()
    stream = oai.completions.create(
        model=DEFAULT_MODEL_ID, prompt=COUNT, temperature=0, max_tokens=24, stream=True
    )
    for chunk in stream:
        pieces.append(chunk.choices[0].text if chunk.choices else "")
        joined.set()  # the second request arrives while this one decodes
    thread.join(60)
    assert "".join(pieces) == alone
    assert other == [other_alone]


def _at_once(oai: openai.OpenAI, requests: list[dict[str, Any]]) -> list[Any]:
    """The completions of `requests` (keyword arguments of `_complete`) sent together."""
    replies: list[Any] = [None] * len(requests)
    ready = threading.Barrier(len(requests))

    def send(i: int) -> None:
        ready.wait(60)
        replies[i] = _complete(oai, **requests[i])

    threads = [threading.Thread(target=send, args=(i,)) for i in range(len(requests))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    return replies


def test_counting_requests_batched_together_are_drafted_and_decode_the_same(oai: openai.OpenAI) -> None:
    requests: list[dict[str, Any]] = [
        {"logprobs": 2},
        {"logprobs": 2, "max_tokens": 16},
        {"stop": [" 9,"]},
        {"frequency_penalty": 0.4},
    ]
    looked_up = _at_once(oai, requests)
    plain = _at_once(oai, [{**r, "extra": OFF} for r in requests])
    for ours, theirs, request in zip(looked_up, plain, requests, strict=True):
        assert ours.choices[0].text == theirs.choices[0].text, request
        assert ours.usage.completion_tokens == theirs.usage.completion_tokens, request
        # Each row is drafted in the batch (none of them decodes alone long enough to draft 4).
        assert _drafted(ours) >= 4 and _drafted(theirs) == 0, request
    assert plain[2].choices[0].text == " 6, 7, 8,"
    for ours, theirs in zip(looked_up[:2], plain[:2], strict=True):
        assert ours.choices[0].logprobs.tokens == theirs.choices[0].logprobs.tokens
        mine, other = ours.choices[0].logprobs.token_logprobs, theirs.choices[0].logprobs.token_logprobs
        assert mine == pytest.approx(other, abs=1e-3)


def test_seeded_samples_batched_together_are_what_plain_decoding_gives(oai: openai.OpenAI) -> None:
    requests: list[dict[str, Any]] = [{"temperature": 1.2, "seed": s, "max_tokens": 16} for s in (3, 11, 12)]
    looked_up = _at_once(oai, requests)
    plain = _at_once(oai, [{**r, "extra": OFF} for r in requests])
    assert [r.choices[0].text for r in looked_up] == [r.choices[0].text for r in plain]
    assert all(_drafted(r) > 0 for r in looked_up)
