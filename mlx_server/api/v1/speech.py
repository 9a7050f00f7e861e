"""POST /v1/audio/speech: validate, speak through the pool, stream the encoded audio."""

from __future__ import annotations

from collections.abc import AsyncIterator

from fastapi import APIRouter, Request
from fastapi.responses import StreamingResponse

from mlx_server.api.audit_middleware import AuditDetails, audit_details
from mlx_server.schemas.speech import SpeechRequest
from mlx_server.services.pipeline.catalog import resolve_model
from mlx_server.services.speech.synthesis import SpeechStream, synthesize_speech

router = APIRouter(tags=["audio"])


async def _audited(stream: SpeechStream, details: AuditDetails) -> AsyncIterator[bytes]:
    try:
        async for chunk in stream:
            yield chunk
    finally:
        details.audio_seconds = round(stream.stats.audio_seconds, 3)
        details.error = details.error or stream.stats.error


@router.post("/audio/speech", response_class=StreamingResponse)
async def create_speech(body: SpeechRequest, request: Request) -> StreamingResponse:
    model = resolve_model(body.model)
    details = audit_details(request)
    details.model, details.protocol, details.stream = model, "openai", True
    details.parameters = body.model_dump(include={"voice", "speed", "response_format"}, exclude_unset=True)
    details.parameters["input_chars"] = len(body.input)
    stream = await synthesize_speech(
        model, body.input, voice=body.voice, speed=body.speed, response_format=body.response_format
    )
    if stream.stats.first_audio_at is not None:
        details.ttft_ms = (stream.stats.first_audio_at - details.started) * 1000
    return StreamingResponse(
        _audited(stream, details),
        media_type=stream.media_type,
        headers={"X-Sample-Rate": str(stream.stats.sample_rate)},
    )
