"""A transcript in each of OpenAI's response formats, and its streaming events."""

from __future__ import annotations

from typing import Any, Literal

from mlx_server.services.transcription.transcribe import Segment, Transcript

ResponseFormat = Literal["json", "text", "srt", "verbose_json", "vtt"]
MEDIA_TYPES: dict[str, str] = {
    "json": "application/json",
    "verbose_json": "application/json",
    "text": "text/plain; charset=utf-8",
    "srt": "application/x-subrip; charset=utf-8",
    "vtt": "text/vtt; charset=utf-8",
}


def _clock(seconds: float, decimal: str) -> str:
    millis = round(seconds * 1000)
    hours, millis = divmod(millis, 3_600_000)
    minutes, millis = divmod(millis, 60_000)
    secs, millis = divmod(millis, 1000)
    return f"{hours:02d}:{minutes:02d}:{secs:02d}{decimal}{millis:03d}"


def subtitles(segments: list[Segment], kind: Literal["srt", "vtt"]) -> str:
    """SubRip (numbered cues, comma before the milliseconds) or WebVTT (a header, dots)."""
    decimal = "," if kind == "srt" else "."
    cues = []
    for number, segment in enumerate(segments, start=1):
        timing = f"{_clock(segment.start, decimal)} --> {_clock(segment.end, decimal)}"
        cue = f"{timing}\n{segment.text.strip()}\n"
        cues.append(f"{number}\n{cue}" if kind == "srt" else cue)
    body = "\n".join(cues)
    return body if kind == "srt" else f"WEBVTT\n\n{body}"


def _usage(transcript: Transcript) -> dict[str, Any]:
    return {"type": "duration", "seconds": transcript.duration}


def verbose(transcript: Transcript, task: str, granularities: set[str]) -> dict[str, Any]:
    body: dict[str, Any] = {
        "task": task,
        "language": transcript.language,
        "duration": transcript.duration,
        "text": transcript.text,
    }
    if "segment" in granularities or not granularities:
        body["segments"] = [
            {
                "id": s.id,
                "seek": 0,
                "start": s.start,
                "end": s.end,
                "text": s.text,
                "tokens": [],
                "temperature": s.temperature,
                "avg_logprob": s.avg_logprob,
                "compression_ratio": s.compression_ratio,
                "no_speech_prob": s.no_speech_prob,
            }
            for s in transcript.segments
        ]
    if "word" in granularities:
        body["words"] = [
            {"word": w.word.strip(), "start": w.start, "end": w.end}
            for s in transcript.segments
            for w in s.words
        ]
    body["usage"] = _usage(transcript)
    return body


def render(
    transcript: Transcript, response_format: ResponseFormat, task: str, granularities: set[str]
) -> Any:
    """The response body: a JSON object, or text for text/srt/vtt."""
    if response_format == "json":
        return {"text": transcript.text, "usage": _usage(transcript)}
    if response_format == "verbose_json":
        return verbose(transcript, task, granularities)
    if response_format == "text":
        return transcript.text + "\n"
    return subtitles(transcript.segments, response_format)


def delta_event(segments: list[Segment], first: bool) -> dict[str, Any]:
    text = "".join(s.text for s in segments)
    return {"type": "transcript.text.delta", "delta": text.lstrip() if first else text}


def done_event(transcript: Transcript) -> dict[str, Any]:
    return {"type": "transcript.text.done", "text": transcript.text, "usage": _usage(transcript)}
