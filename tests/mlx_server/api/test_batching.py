"""Continuous batching seen from clients (real openai SDK, real server, SmolLM2): simultaneous
requests decode in one batch and each gets what it would have got alone; a client that leaves
frees its place; grammar, seeds and logprobs stay per request; a long prompt prefills in chunks
between the others' tokens."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import httpx
import openai

from mlx_server.models.store import DEFAULT_MODEL_ID
from tests.support import ServerProcess

MODEL = DEFAULT_MODEL_ID
T = TypeVar("T")
TOPICS = ["cats", "rain", "bread", "trains", "the sea", "music", "snow", "bees"]
# Legacy completions (a few-token prompt) where only the batching is under test: a chat
# prompt's template adds a ~30-token system turn, and prefill is slow on this CPU.
POINT = {
    "type": "object",
    "properties": {"x": {"type": "integer"}, "y": {"type": "integer"}},
    "required": ["x", "y"],
    "additionalProperties": False,
}


def _ask(topic: str) -> list[Any]:
    return [{"role": "user", "content": f"One sentence about {topic}."}]


def _together(calls: list[Callable[[], T]]) -> list[T]:
    """Run the calls at the same moment, one thread each."""
    start = threading.Barrier(len(calls))

    def run(call: Callable[[], T]) -> T:
        start.wait()
        return call()

    with ThreadPoolExecutor(len(calls)) as pool:
        return list(pool.map(run, calls))


def _streamed(oai: openai.OpenAI, topic: str, **options: Any) -> str:
    chunks = oai.chat.completions.create(model=MODEL, messages=_ask(topic), stream=True, **options)
    return "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)


def _reply(oai: openai.OpenAI, topic: str, **options: Any) -> Any:
    return oai.chat.completions.create(model=MODEL, messages=_ask(topic), **options)


# Six tokens each: a batch that mixed up sequences, caches or masks shows it from the first token.
STORY_TOKENS = 6


def _completed(oai: openai.OpenAI, topic: str) -> str:
    reply = oai.completions.create(
        model=MODEL, prompt=f"A story about {topic}:", temperature=0, max_tokens=STORY_TOKENS
    )
    return reply.choices[0].text


def _completed_streaming(oai: openai.OpenAI, topic: str) -> str:
    chunks = oai.completions.create(
        model=MODEL, prompt=f"A story about {topic}:", stream=True, temperature=0, max_tokens=STORY_TOKENS
    )
    return "".join(c.choices[0].text for c in chunks if c.choices)


def _batch(server: ServerProcess) -> dict[str, int]:
    pool = httpx.get(f"{server.url}/v1/admin/pool", timeout=10).json()
    batch: dict[str, int] = next(m for m in pool["models"] if m["id"] == MODEL)["batch"]
    return batch


class _Watch:
    """The largest number of sequences the model's batch decoded at once while the block ran."""

    def __init__(self, server: ServerProcess) -> None:
        self.server = server
        self.most = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)

    def _poll(self) -> None:
        while not self._stop.wait(0.05):
            self.most = max(self.most, _batch(self.server)["running"])

    def __enter__(self) -> _Watch:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()


def test_eight_simultaneous_greedy_streams_each_equal_their_single_stream_reference(
    oai: openai.OpenAI, inference_server: ServerProcess
) -> None:
    references = [_completed(oai, topic) for topic in TOPICS]
    with _Watch(inference_server) as watch:
        streamed = _together([lambda t=t: _completed_streaming(oai, t) for t in TOPICS])  # type: ignore[misc]
    assert streamed == references
    assert watch.most >= 4  # they really decoded together
    assert _batch(inference_server)["max_batch_size"] == 8


def test_a_stream_cancelled_in_a_batch_frees_its_place_and_the_others_finish(
    oai: openai.OpenAI, inference_server: ServerProcess
) -> None:
    references = [_completed(oai, topic) for topic in TOPICS[:3]]

    def leaver() -> int:
        stream = oai.completions.create(
            model=MODEL, prompt="A long story about a lighthouse:", stream=True, temperature=0, max_tokens=300
        )
        for received, _chunk in enumerate(stream, start=1):
            if received == 4:
                break
        stream.close()
        return received

    calls: list[Callable[[], Any]] = [leaver, *[lambda t=t: _completed_streaming(oai, t) for t in TOPICS[:3]]]
    left, *finished = _together(calls)
    assert left == 4
    assert finished == references
    deadline = time.monotonic() + 5
    while (batch := _batch(inference_server))["running"] + batch["queued"] + batch["prefilling"]:
        assert time.monotonic() < deadline, f"the batch still holds sequences: {batch}"
        time.sleep(0.05)


def test_a_constrained_and_a_free_request_in_one_batch_are_both_right(oai: openai.OpenAI) -> None:
    schema_format: Any = {
        "type": "json_schema",
        "json_schema": {"name": "point", "schema": POINT, "strict": True},
    }
    free_options = {"temperature": 0, "max_tokens": 10}
    reference = _reply(oai, "owls", **free_options).choices[0].message.content

    def constrained() -> str:
        reply = oai.chat.completions.create(
            model=MODEL,
            messages=[{"role": "user", "content": "Give a point as JSON."}],
            response_format=schema_format,
            temperature=0,
            max_tokens=16,
        )
        return reply.choices[0].message.content or ""

    point, free = _together([constrained, lambda: _streamed(oai, "owls", **free_options)])
    parsed = json.loads(point)
    assert set(parsed) == {"x", "y"} and all(isinstance(v, int) for v in parsed.values())
    assert free == reference


def test_the_same_seed_gives_the_same_text_inside_a_batch(oai: openai.OpenAI) -> None:
    options = {"temperature": 0.9, "max_tokens": 12, "seed": 1234}
    alone = _reply(oai, "a fox", **options).choices[0].message.content
    other = {"temperature": 0.9, "max_tokens": 12, "seed": 99}
    first, second, _ = _together(
        [
            lambda: _streamed(oai, "a fox", **options),
            lambda: _streamed(oai, "a fox", **options),
            lambda: _streamed(oai, "a fox", **other),
        ]
    )
    assert first == second == alone


def test_a_stream_joined_midway_goes_on_as_it_would_have_alone(
    oai: openai.OpenAI, inference_server: ServerProcess
) -> None:
    """A request alone decodes outside the batch; when a second one arrives it moves into the
    batch with its cache and the token it had sampled. Seeded sampling shows any draw lost or
    repeated on the way."""
    options = {"temperature": 0.9, "max_tokens": 24, "seed": 7}
    alone = _streamed(oai, "a lighthouse", **options)
    other_alone = _streamed(oai, "owls", temperature=0, max_tokens=8)
    joined = threading.Event()

    def first() -> str:
        chunks = oai.chat.completions.create(
            model=MODEL, messages=_ask("a lighthouse"), stream=True, **options
        )
        text = []
        for chunk in chunks:
            if chunk.choices and chunk.choices[0].delta.content:
                text.append(chunk.choices[0].delta.content)
                if len(text) == 3:
                    joined.set()
        return "".join(text)

    def second() -> str:
        assert joined.wait(60)
        return _streamed(oai, "owls", temperature=0, max_tokens=8)

    with _Watch(inference_server) as watch:
        texts = _together([first, second])
    assert texts == [alone, other_alone]
    assert watch.most == 2  # the second joined the first in one batch


def test_logprobs_inside_a_batch_are_the_requests_own(oai: openai.OpenAI) -> None:
    options = {"temperature": 0, "max_tokens": 8, "logprobs": True, "top_logprobs": 2}
    alone = _reply(oai, "tea", **options)

    batched, _ = _together(
        [lambda: _reply(oai, "tea", **options), lambda: _streamed(oai, "coffee", temperature=0, max_tokens=8)]
    )
    expected = alone.choices[0].logprobs.content
    got = batched.choices[0].logprobs.content
    assert [t.token for t in got] == [t.token for t in expected]
    assert len(got) == batched.usage.completion_tokens
    assert all(
        len(t.top_logprobs) == 2 and t.top_logprobs[0].logprob >= t.top_logprobs[1].logprob for t in got
    )
    for mine, reference in zip(got, expected, strict=True):
        assert abs(mine.logprob - reference.logprob) < 1e-3


def test_two_conversations_at_once_reuse_their_own_caches(oai: openai.OpenAI) -> None:
    systems = [
        "You are a gardener. You answer questions about plants, soil and seasons briefly.",
        "You are a cook. You answer questions about recipes, spices and ovens briefly.",
    ]
    conversations: list[list[Any]] = [[{"role": "system", "content": s}] for s in systems]
    previous = [0, 0]
    for round_no, question in enumerate(["Hello!", "What first?", "Thanks."]):

        def turn(index: int, question: str = question) -> Any:
            conversations[index].append({"role": "user", "content": question})
            return oai.chat.completions.create(
                model=MODEL, messages=conversations[index], temperature=0, max_tokens=6
            )

        replies = _together([lambda: turn(0), lambda: turn(1)])
        for index, reply in enumerate(replies):
            conversations[index].append(
                {"role": "assistant", "content": reply.choices[0].message.content or ""}
            )
            usage = reply.usage
            cached = usage.prompt_tokens_details.cached_tokens or 0
            if round_no > 0:  # the whole previous prompt of this conversation came from its cache
                assert cached >= previous[index], (index, round_no, cached, previous[index])
            previous[index] = usage.prompt_tokens


def test_a_long_prompt_prefills_between_the_tokens_of_a_running_stream(oai: openai.OpenAI) -> None:
    """~400 tokens prefill in two chunks of 256: the running stream gets tokens in between."""
    long_text = " ".join(f"Line {i}: the quick brown fox jumps over the lazy dog." for i in range(30))
    arrivals: list[float] = []
    long_sent = threading.Event()
    window: list[float] = []

    def running() -> None:
        chunks = oai.chat.completions.create(
            model=MODEL, messages=_ask("a long road"), stream=True, temperature=0, max_tokens=24
        )
        for chunk in chunks:
            if chunk.choices and chunk.choices[0].delta.content:
                arrivals.append(time.monotonic())
                if len(arrivals) == 3:
                    long_sent.set()

    def long_prompt() -> None:
        long_sent.wait(60)
        sent = time.monotonic()
        chunks = oai.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": long_text}], stream=True, max_tokens=1
        )
        for chunk in chunks:
            if chunk.choices and (chunk.choices[0].delta.content or chunk.choices[0].finish_reason):
                window.extend([sent, time.monotonic()])
                break
        chunks.close()

    _together([running, long_prompt])
    sent, first_token = window[0], window[1]
    during = [t for t in arrivals if sent < t < first_token]
    assert len(during) >= 2, (first_token - sent, len(arrivals))


def test_a_request_that_leaves_while_prefilling_stops_at_a_chunk_boundary(
    oai: openai.OpenAI, inference_server: ServerProcess
) -> None:
    """The client goes away during a ~400-token prefill: the prefill stops at the next chunk
    and keeps what it computed, so the same prompt then finds part of it (not all) cached."""
    long_text = " ".join(f"Item {i}: a red kite flies over the green hill at noon." for i in range(30))
    messages: Any = [{"role": "user", "content": long_text}]
    stream = oai.chat.completions.create(model=MODEL, messages=messages, stream=True, max_tokens=1)
    next(iter(stream))  # the role chunk comes before the prefill is done
    stream.close()
    deadline = time.monotonic() + 30
    while (batch := _batch(inference_server))["running"] + batch["queued"] + batch["prefilling"]:
        assert time.monotonic() < deadline, f"the batch still holds sequences: {batch}"
        time.sleep(0.05)
    usage = oai.chat.completions.create(model=MODEL, messages=messages, max_tokens=1).usage
    assert usage is not None and usage.prompt_tokens_details is not None
    cached = usage.prompt_tokens_details.cached_tokens or 0
    assert 0 < cached < usage.prompt_tokens - 1, (cached, usage.prompt_tokens)
