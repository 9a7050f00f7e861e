"""The playground's voice: replies read aloud by a text-to-speech model, and what the microphone
recorded turned into text by a speech-to-text model. Both go through the server's services
(the facade), with the first model of each kind; without one, the page disables the button
and says what to import."""

from __future__ import annotations

import re
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from sqlmodel import Session, select

from mlx_manager.records import ConversationMessage
from mlx_server.facade import (
    MAX_SPEECH_INPUT_CHARS,
    ModelCapabilities,
    ModelType,
    SpeechStream,
    Transcript,
    TranscriptionOptions,
    check_request,
    detect_model_type,
    inspect_audio,
    list_models,
    synthesize_speech,
    transcribe_audio,
)

_CODE_BLOCK = re.compile(r"```.*?(```|$)", re.DOTALL)
_MARKUP = re.compile(r"[*_#>`|~]+")
_SENTENCE_END = re.compile(r"[.!?](\s|$)")


class VoiceError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass(frozen=True)
class VoiceModels:
    speech: str | None  # reads replies aloud
    transcription: str | None  # hears the microphone
    audio: frozenset[str]  # every audio model: none of them can chat

    @classmethod
    def of(cls, session: Session) -> VoiceModels:
        """As probed, or detected from the files of unprobed models."""
        probed = {c.model_id: c.model_type for c in session.exec(select(ModelCapabilities))}
        kinds = {r.id: probed.get(r.id) or detect_model_type(Path(r.path)) for r in list_models(session)}
        speech = [i for i, kind in kinds.items() if kind == ModelType.TEXT_TO_SPEECH]
        heard = [i for i, kind in kinds.items() if kind == ModelType.SPEECH_TO_TEXT]
        return cls(
            speech=speech[0] if speech else None,
            transcription=heard[0] if heard else None,
            audio=frozenset(speech + heard),
        )


def spoken_text(markdown: str) -> str:
    """What of a reply is worth hearing: its prose without code blocks or Markdown marks, cut at
    a sentence end to the speech input limit."""
    text = _MARKUP.sub("", _CODE_BLOCK.sub(" ", markdown))
    text = " ".join(text.split())
    if len(text) <= MAX_SPEECH_INPUT_CHARS:
        return text
    head = text[:MAX_SPEECH_INPUT_CHARS]
    ends = [m.end() for m in _SENTENCE_END.finditer(head)]
    return head[: ends[-1]].strip() if ends else head


async def read_aloud(session: Session, message_id: int) -> SpeechStream:
    """A reply spoken by the first text-to-speech model, as a streamed WAV file."""
    message = session.get(ConversationMessage, message_id)
    if message is None or message.role != "assistant":
        raise VoiceError(404, f"There is no reply {message_id}; it may have been deleted or regenerated.")
    text = spoken_text(message.content)
    if not text:
        raise VoiceError(400, "This reply has no text to read aloud (only code or tool calls).")
    model = VoiceModels.of(session).speech
    if model is None:
        raise VoiceError(409, "No text-to-speech model: import one on the Models page to hear replies.")
    return await synthesize_speech(model, text, voice=None, speed=1.0, response_format="wav")


async def transcribe_recording(session: Session, recording: BinaryIO, name: str) -> str:
    """What the microphone recorded (a WAV the page made), as text from the first speech-to-text
    model; the upload is spooled to a file of its own, which the decoder reads block by block."""
    model = VoiceModels.of(session).transcription
    if model is None:
        raise VoiceError(
            409, "No speech-to-text model: import whisper-tiny.en on the Models page to dictate."
        )
    options = TranscriptionOptions()
    with tempfile.NamedTemporaryFile(prefix="mlx-recording-", suffix=Path(name).suffix[:10]) as spooled:
        shutil.copyfileobj(recording, spooled, length=1 << 20)
        spooled.flush()
        audio = inspect_audio(Path(spooled.name), name)
        transcript = Transcript(language=check_request(model, options), duration=audio.duration)
        async for _ in transcribe_audio(model, audio, options, transcript):
            pass
    return transcript.text
