"""Uploaded audio: what it is (checked before any model runs) and its samples as 16 kHz mono
float32, decoded and resampled piece by piece so memory does not grow with the file's length.

miniaudio (what mlx-audio reads wav/mp3/flac with) decodes WAV, MP3, FLAC and Ogg Vorbis from
the spooled upload; the resampler is mlx-audio's polyphase FIR, run on aligned blocks with
enough input either side that each block's output equals a whole-file resample. Containers
only ffmpeg decodes (m4a, webm, Ogg Opus) are refused with a clear message when it is absent.
"""

from __future__ import annotations

import math
import shutil
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import miniaudio
import numpy as np

from mlx_server.config import get_settings
from mlx_server.errors import APIError

SAMPLE_RATE = 16000  # what Whisper (and mlx-audio's STT models) hear
# Uploads sampled outside this range are refused: below it there is no speech band left, and
# resampling from an absurd rate (1 Hz) builds a filter of millions of taps per block.
MIN_SAMPLE_RATE = 4000
MAX_SAMPLE_RATE = 384_000
BLOCK_SECONDS = 5  # decoded and resampled at a time
_FIR_ZEROS = 64  # mlx-audio's resampler: a Kaiser sinc with 64 zero crossings per side
_FFMPEG_ONLY = {"m4a": "M4A/AAC", "webm": "WebM", "opus": "Ogg Opus"}
_ACCEPTED = "wav, mp3, flac or ogg (Vorbis)"
Samples = np.ndarray[Any, np.dtype[np.float32]]


@dataclass(frozen=True)
class AudioFile:
    path: Path
    format: str
    sample_rate: int
    frames: int  # as the header declares; decoding stops with a 400 past `max_frames`
    name: str = "file"
    max_frames: int = 1 << 62

    @property
    def duration(self) -> float:
        return self.frames / self.sample_rate


def _refuse(message: str, code: str = "invalid_audio") -> APIError:
    return APIError(400, message, param="file", code=code)


def _sniff(head: bytes) -> str | None:
    if head[:4] == b"RIFF" and head[8:12] == b"WAVE":
        return "wav"
    if head[:4] == b"fLaC":
        return "flac"
    if head[:4] == b"OggS":
        return "opus" if b"OpusHead" in head else "ogg"
    if head[4:8] == b"ftyp":
        return "m4a"
    if head[:4] == b"\x1a\x45\xdf\xa3":
        return "webm"
    if head[:3] == b"ID3" or (len(head) > 1 and head[0] == 0xFF and head[1] & 0xE0 == 0xE0):
        return "mp3"
    return None


def _check_wav_length(path: Path, name: str) -> None:
    """A WAV whose data chunk declares more bytes than the file holds was cut short."""
    size = path.stat().st_size
    with path.open("rb") as f:
        offset = 12
        while offset + 8 <= size:
            f.seek(offset)
            chunk_id, length = struct.unpack("<4sI", f.read(8))
            if chunk_id == b"data":
                held = size - offset - 8
                if length not in (0, 0xFFFFFFFF) and held < length:  # 0/max: length not known
                    raise _refuse(
                        f"{name} is a truncated WAV file: its header declares {length} bytes of audio "
                        f"but it holds {held}. Upload the whole file."
                    )
                return
            offset += 8 + length + (length & 1)
    raise _refuse(f"{name} is a WAV file without audio data (no data chunk).")


def _clock(seconds: float) -> str:
    hours, rest = divmod(round(seconds), 3600)
    return f"{hours}:{rest // 60:02d}:{rest % 60:02d}"


def _check_flac_end(path: Path, name: str, frames: int, rate: int) -> None:
    """A FLAC file states its length in its header; one cut short cannot seek to its end."""
    try:
        tail = miniaudio.stream_file(
            str(path),
            output_format=miniaudio.SampleFormat.FLOAT32,
            nchannels=1,
            sample_rate=rate,
            frames_to_read=256,
            seek_frame=max(0, frames - 256),
        )
        next(tail, None)
        tail.close()
    except miniaudio.MiniaudioError as exc:
        raise _refuse(
            f"{name} is a truncated FLAC file: its header declares {_clock(frames / rate)} of audio but "
            "it ends before that. Upload the whole file."
        ) from exc


def _check_stream_info(path: Path, name: str, kind: str, info: Any, max_seconds: float) -> None:
    """The sample rate and the length the header declares, before anything is decoded."""
    rate = info.sample_rate
    if info.num_frames <= 0 or rate <= 0:
        raise _refuse(f"{name} holds no audio samples.")
    if not MIN_SAMPLE_RATE <= rate <= MAX_SAMPLE_RATE:
        raise _refuse(
            f"{name} declares a sample rate of {rate} Hz; audio is heard at {MIN_SAMPLE_RATE} Hz to "
            f"{MAX_SAMPLE_RATE} Hz. Resample it (e.g. to 16000 Hz)."
        )
    duration = info.num_frames / rate
    if duration > max_seconds:
        raise _refuse(
            f"{name} lasts {_clock(duration)} ({duration:.0f} s), longer than the {_clock(max_seconds)} "
            f"({max_seconds:.0f} s) this server transcribes (MLX_SERVER_MAX_AUDIO_SECONDS); "
            "cut it into parts.",
            code="audio_too_long",
        )
    if kind == "flac":
        _check_flac_end(path, name, info.num_frames, rate)


def inspect_audio(path: Path, name: str, max_seconds: float | None = None) -> AudioFile:
    """The upload's format, sample rate and length; a 400 naming the problem when it is not
    audio this server can decode, or lasts longer than `max_seconds` (the setting's)."""
    if path.stat().st_size == 0:
        raise _refuse(f"{name} is empty; upload an audio file ({_ACCEPTED}).")
    with path.open("rb") as f:
        head = f.read(64)
    kind = _sniff(head)
    if kind in _FFMPEG_ONLY and shutil.which("ffmpeg") is None:
        raise _refuse(
            f"{name} is {_FFMPEG_ONLY[kind]}, which needs ffmpeg, not installed on this server; "
            f"convert it to {_ACCEPTED}.",
            code="unsupported_audio_format",
        )
    if kind is None or kind in _FFMPEG_ONLY:
        raise _refuse(f"{name} is not an audio file this server can read; upload {_ACCEPTED}.")
    if kind == "wav":
        _check_wav_length(path, name)
    try:
        info = miniaudio.get_file_info(str(path))
    except miniaudio.MiniaudioError as exc:
        raise _refuse(f"{name} looks like {kind} but cannot be decoded ({exc}).") from exc
    limit = get_settings().max_audio_seconds if max_seconds is None else max_seconds
    _check_stream_info(path, name, kind, info, limit)
    return AudioFile(
        path=path,
        format=kind,
        sample_rate=info.sample_rate,
        frames=info.num_frames,
        name=name,
        max_frames=math.ceil(limit * info.sample_rate),
    )


def _native_blocks(audio: AudioFile, frames: int) -> Iterator[np.ndarray[Any, np.dtype[np.float32]]]:
    """Mono float32 at the file's own rate, about `frames` at a time."""
    stream = miniaudio.stream_file(
        str(audio.path),
        output_format=miniaudio.SampleFormat.FLOAT32,
        nchannels=1,
        sample_rate=audio.sample_rate,
        frames_to_read=frames,
    )
    decoded = 0
    try:
        for block in stream:
            samples = np.frombuffer(block, dtype=np.float32)
            decoded += len(samples)
            if decoded > audio.max_frames:  # the header said less: it lied, or was not read
                limit = audio.max_frames / audio.sample_rate
                raise _refuse(
                    f"{audio.name} holds more than {_clock(limit)} ({limit:.0f} s) of audio, the most this "
                    "server transcribes (MLX_SERVER_MAX_AUDIO_SECONDS); cut it into parts.",
                    code="audio_too_long",
                )
            yield samples
    except miniaudio.MiniaudioError as exc:
        heard = decoded / audio.sample_rate
        raise _refuse(f"{audio.name} cannot be decoded after {heard:.1f} s ({exc}); it is damaged.") from exc
    finally:
        stream.close()


def samples_16k(audio: AudioFile) -> Iterator[np.ndarray[Any, np.dtype[np.float32]]]:
    """The audio as 16 kHz mono float32 in blocks of about BLOCK_SECONDS; at most a few blocks
    are held at once, whatever the file's length."""
    rate = audio.sample_rate
    if rate == SAMPLE_RATE:
        yield from _native_blocks(audio, BLOCK_SECONDS * rate)
        return
    resample = _Resampler(rate)
    up, down = resample.up, resample.down
    # Input frames each side that the FIR reaches, rounded to whole `down` steps so every block
    # starts at the same polyphase phase as the whole signal.
    halo = math.ceil(math.ceil((_FIR_ZEROS * max(up, down) + down) / up) / down) * down
    core = max(down, BLOCK_SECONDS * rate // down * down)
    buffer = np.empty(0, dtype=np.float32)
    start = 0  # global frame index of buffer[0]
    core_start = 0
    for block in _native_blocks(audio, core):
        buffer = np.concatenate([buffer, block])
        while start + len(buffer) >= core_start + core + halo:
            yield resample.block(buffer, start, core_start, core_start + core, halo)
            core_start += core
            drop = max(0, core_start - halo) - start
            buffer, start = buffer[drop:], start + drop
    end = start + len(buffer)
    while core_start < end:
        yield resample.block(buffer, start, core_start, min(end, core_start + core), halo)
        core_start += core


class _Resampler:
    """mlx-audio's polyphase FIR resampler (`resample_audio_array`) with its filter designed
    once per file instead of once per block (~70 ms for 44.1 kHz, seconds for an odd rate)."""

    def __init__(self, rate: int) -> None:
        # Imported here: scipy.signal takes ~1 s to load, at the first resampled upload only.
        from mlx_audio.resample import _polyphase_filter

        self.up, self.down, self.fir = _polyphase_filter(rate, SAMPLE_RATE)

    def block(self, buffer: Samples, start: int, core_start: int, core_end: int, halo: int) -> Samples:
        """Output samples of input frames [core_start, core_end), from the buffer starting at `start`."""
        from scipy.signal import resample_poly

        up, down = self.up, self.down
        read_start = max(start, core_start - halo)
        segment = buffer[read_start - start : core_end + halo - start]
        converted = resample_poly(segment, up, down, axis=0, window=self.fir, padtype="edge")
        first = core_start * up // down - read_start * up // down
        count = math.ceil(core_end * up / down) - core_start * up // down
        return np.asarray(converted[first : first + count], dtype=np.float32)
