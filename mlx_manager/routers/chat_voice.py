"""The playground's voice: a reply read aloud (streamed WAV for an <audio> element)."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import PlainTextResponse, Response, StreamingResponse

from mlx_manager.deps import RowId, SessionDep
from mlx_manager.services.chat_voice import VoiceError, read_aloud
from mlx_server.facade import APIError

router = APIRouter(prefix="/chat")


@router.get("/messages/{message_id}/speech.wav", response_class=StreamingResponse)
async def speech(session: SessionDep, message_id: RowId) -> Response:
    """The reply as speech, streamed as the model speaks it (reading it changes nothing)."""
    try:
        stream = await read_aloud(session, message_id)
    except (VoiceError, APIError) as exc:
        return PlainTextResponse(exc.message, status_code=exc.status)
    return StreamingResponse(stream, media_type=stream.media_type, headers={"Cache-Control": "no-store"})
