"""Whisper beam search (`beam_size`, our form field) through /v1/audio/transcriptions with the
real whisper tiny.en hearing espeak-ng speech: fewer word errors than greedy, as a request's
choice and as the model's default, with word timestamps and streaming still working.

Each 30 s window costs seconds of CPU here, beams more: the tests share few requests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from fastapi.testclient import TestClient
from sqlmodel import Session, select

from mlx_server.database import get_engine
from mlx_server.records import AuditLog
from mlx_server.services.operations.audit import audit_service
from tests.fixtures.speech_clips import SPOKEN, word_error_rate
from tests.mlx_server.api.conftest import standalone_server

MODEL = "whisper-tiny.en"


@pytest.fixture
def server(home: Path, whisper_dir: Path) -> Iterator[TestClient]:
    with standalone_server({MODEL: whisper_dir}) as client:
        yield client


def _hear(server: TestClient, clip: Path, **fields: Any) -> httpx.Response:
    with clip.open("rb") as f:
        return server.post("/v1/audio/transcriptions", data={"model": MODEL, **fields}, files={"file": f})


def test_beam_search_hears_short_sentences_better_than_greedy_as_the_models_default(
    server: TestClient, sentences_clip: Path
) -> None:
    """Greedy asked for explicitly, then 5 beams from the model's default (the request leaves
    beam_size out), with word timestamps: 22 sentences, two windows, each heard both ways."""
    greedy = _hear(server, sentences_clip, beam_size="1")
    assert greedy.status_code == 200, greedy.text
    patched = server.patch(f"/v1/admin/models/{MODEL}/defaults", json={"beam_size": 5})
    assert patched.status_code == 200 and patched.json()["beam_size"] == 5, patched.text
    fields = {"response_format": "verbose_json", "timestamp_granularities[]": "word"}
    beams = _hear(server, sentences_clip, **fields)
    assert beams.status_code == 200, beams.text
    greedy_text, heard = greedy.json()["text"], beams.json()
    greedy_wer, beam_wer = word_error_rate(SPOKEN, greedy_text), word_error_rate(SPOKEN, heard["text"])
    print(f"greedy WER {greedy_wer:.1%}, beam 5 WER {beam_wer:.1%}")
    assert beam_wer < greedy_wer, (greedy_text, heard["text"])
    times = [t for word in heard["words"] for t in (word["start"], word["end"])]
    assert len(heard["words"]) >= len(SPOKEN.split()) * 0.8
    assert times == sorted(times) and times[-1] <= heard["duration"] + 0.01, times


def test_a_streamed_request_with_five_beams_hears_the_brown_fox(server: TestClient, fox_clip: Path) -> None:
    sdk = openai.OpenAI(base_url="http://testserver/v1", api_key="x", http_client=server, max_retries=0)
    with fox_clip.open("rb") as f:
        events = list(
            sdk.audio.transcriptions.create(model=MODEL, file=f, stream=True, extra_body={"beam_size": 5})
        )
    done = events[-1]
    assert done.type == "transcript.text.done" and "brown fox" in done.text.lower(), done.text
    assert "".join(e.delta for e in events[:-1]).strip() == done.text  # type: ignore[union-attr]
    assert audit_service.flush()
    with Session(get_engine()) as session:
        [row] = session.exec(select(AuditLog).where(AuditLog.endpoint == "POST /v1/audio/transcriptions"))
    assert row.status == 200 and row.stream and (row.parameters or {}).get("beam_size") == 5
    for field, value in (("beam_size", "17"), ("beam_size", "0"), ("patience", "0")):
        refused = _hear(server, fox_clip, **{"beam_size": "5", field: value})
        assert refused.status_code == 400 and field in refused.text, refused.text
