"""The playground's voice: a reply read aloud (streamed WAV for an <audio> element) and the
microphone's recording transcribed into the message box (plain text for the page's script)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, File, Request, UploadFile
from fastapi.responses import PlainTextResponse, Response, StreamingResponse

from mlx_manager.deps import RowId, SessionDep
from mlx_manager.services.chat_voice import VoiceError, read_aloud, transcribe_recording
from mlx_manager.web.csrf import is_same_origin
from mlx_server.facade import APIError

router = APIRouter(prefix="/chat")


@router.get("/messages/{message_id}/speech.wav", response_class=StreamingResponse)
async def speech(request: Request, session: SessionDep, message_id: RowId) -> Response:
    """The reply as speech, streamed as the model speaks it (it changes no data, but loads the
    speech model). Not for another site's or origin's page: an <audio> element there could load
    the model, play a reply and learn its length; a page on another port of this host is the
    same site and carries the session cookie."""
    if not is_same_origin(request.headers):
        return PlainTextResponse("Replies are read aloud on this dashboard's own pages only.", 403)
    try:
        stream = await read_aloud(session, message_id)
    except (VoiceError, APIError) as exc:
        return PlainTextResponse(exc.message, status_code=exc.status)
    return StreamingResponse(stream, media_type=stream.media_type, headers={"Cache-Control": "no-store"})


@router.post("/transcribe", response_class=PlainTextResponse)
async def transcribe(session: SessionDep, file: Annotated[UploadFile, File()]) -> Response:
    """The recording's text, for the page to put into the message box."""
    try:
        text = await transcribe_recording(session, file.file, file.filename or "recording.wav")
    except (VoiceError, APIError) as exc:
        return PlainTextResponse(exc.message, status_code=exc.status)
    return PlainTextResponse(text)
