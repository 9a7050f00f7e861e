"""POST /v1/audio/transcriptions and /v1/audio/translations (OpenAI's multipart shape): check
the upload and the options, hear it through the pool, answer in the asked format or stream it."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import aclosing
from pathlib import Path
from typing import Annotated, Any

from fastapi import APIRouter, File, Form, Request, UploadFile
from fastapi.responses import JSONResponse, PlainTextResponse, Response

from mlx_server.api.audit_middleware import CLIENT_CLOSED_REQUEST, AuditDetails, audit_details
from mlx_server.api.disconnect import until_disconnected
from mlx_server.api.sse import openai_event_stream
from mlx_server.errors import APIError
from mlx_server.models.defaults import MAX_BEAM_SIZE
from mlx_server.schemas.limits import MAX_MODEL_NAME_CHARS
from mlx_server.services.pipeline.catalog import resolve_model
from mlx_server.services.transcription.audio_input import inspect_audio
from mlx_server.services.transcription.formats import (
    MEDIA_TYPES,
    ResponseFormat,
    delta_event,
    done_event,
    render,
)
from mlx_server.services.transcription.transcribe import (
    Segment,
    Task,
    Transcript,
    TranscriptionOptions,
    check_request,
    transcribe_audio,
)

router = APIRouter(tags=["audio"])

FileField = Annotated[UploadFile, File(description="The audio: wav, mp3, flac or ogg.")]
ModelField = Annotated[str, Form(max_length=MAX_MODEL_NAME_CHARS)]
FormatField = Annotated[ResponseFormat, Form()]
PromptField = Annotated[str | None, Form(max_length=2000)]
TemperatureField = Annotated[float | None, Form(ge=0.0, le=1.0)]
# Ours (OpenAI's API has neither): Whisper's beam search at temperature 0; left out, the model's
# default beam size applies (1, greedy, unless set). Patience: arXiv:2204.05424.
BeamSizeField = Annotated[int | None, Form(ge=1, le=MAX_BEAM_SIZE)]
PatienceField = Annotated[float, Form(gt=0.0, le=4.0)]


def _spool(upload: UploadFile) -> Path:
    """The upload copied to a file of its own (miniaudio reads paths), a block at a time."""
    suffix = Path(upload.filename or "audio").suffix[:10]
    with tempfile.NamedTemporaryFile(prefix="mlx-audio-", suffix=suffix, delete=False) as target:
        upload.file.seek(0)
        shutil.copyfileobj(upload.file, target, length=1 << 20)
    return Path(target.name)


async def _respond(
    request: Request, upload: UploadFile, model: str, options: TranscriptionOptions,
    response_format: ResponseFormat, granularities: set[str], stream: bool,
) -> Response:  # fmt: skip
    model = resolve_model(model)
    details = audit_details(request)
    details.model, details.protocol, details.stream = model, "openai", stream
    details.parameters = {"response_format": response_format, "task": options.task}
    if options.beam_size is not None:
        details.parameters["beam_size"] = options.beam_size
    path, streaming = _spool(upload), False
    try:
        audio = inspect_audio(path, upload.filename or "file")
        details.audio_seconds = round(audio.duration, 3)
        transcript = Transcript(language=check_request(model, options), duration=round(audio.duration, 3))
        windows = transcribe_audio(model, audio, options, transcript)
        if stream:  # sse-starlette ends the stream (and the windows) when the client leaves
            streaming = True
            return openai_event_stream(_events(windows, transcript, details, path))
        if not await until_disconnected(request, _drain(windows)):
            return Response(status_code=CLIENT_CLOSED_REQUEST)  # nobody reads it; audited as 499
    finally:
        if not streaming:  # the stream removes its file when it ends
            path.unlink(missing_ok=True)
    body = render(transcript, response_format, options.task, granularities)
    if isinstance(body, str):
        return PlainTextResponse(body, media_type=MEDIA_TYPES[response_format])
    return JSONResponse(body)


async def _drain(windows: AsyncGenerator[list[Segment], None]) -> None:
    async with aclosing(windows):
        async for _ in windows:
            pass


async def _events(
    windows: AsyncGenerator[list[Segment], None], transcript: Transcript, details: AuditDetails, path: Path
) -> AsyncIterator[dict[str, Any]]:
    try:
        async with aclosing(windows):
            async for heard in windows:
                if heard:
                    details.mark_first_token()
                    yield delta_event(heard, first=heard[0].id == 0)
        yield done_event(transcript)
    finally:
        path.unlink(missing_ok=True)


def _granularities(values: list[str], response_format: str) -> set[str]:
    chosen, param = set(values), "timestamp_granularities"
    if chosen - {"word", "segment"}:
        raise APIError(400, "timestamp_granularities takes 'word' and/or 'segment'.", param=param)
    if chosen and response_format != "verbose_json":
        raise APIError(400, "timestamp_granularities needs response_format verbose_json.", param=param)
    return chosen


@router.post("/audio/transcriptions", response_model=None)
async def create_transcription(
    request: Request,
    file: FileField,
    model: ModelField,
    language: Annotated[str | None, Form(max_length=32)] = None,
    prompt: PromptField = None,
    response_format: FormatField = "json",
    temperature: TemperatureField = None,
    timestamp_granularities: Annotated[list[str], Form(alias="timestamp_granularities[]")] = [],  # noqa: B006
    stream: Annotated[bool, Form()] = False,
    beam_size: BeamSizeField = None,
    patience: PatienceField = 1.0,
) -> Response:
    granularities = _granularities(timestamp_granularities, response_format)
    options = TranscriptionOptions(
        language=language,
        prompt=prompt,
        temperature=temperature,
        words="word" in granularities,
        beam_size=beam_size,
        patience=patience,
    )
    return await _respond(request, file, model, options, response_format, granularities, stream)


@router.post("/audio/translations", response_model=None)
async def create_translation(
    request: Request,
    file: FileField,
    model: ModelField,
    prompt: PromptField = None,
    response_format: FormatField = "json",
    temperature: TemperatureField = None,
    beam_size: BeamSizeField = None,
    patience: PatienceField = 1.0,
) -> Response:
    task: Task = "translate"
    options = TranscriptionOptions(
        task=task, prompt=prompt, temperature=temperature, beam_size=beam_size, patience=patience
    )
    return await _respond(request, file, model, options, response_format, set(), stream=False)
