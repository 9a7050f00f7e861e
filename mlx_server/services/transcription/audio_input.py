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

from mlx_server.errors import APIError

SAMPLE_RATE = 16000  # what Whisper (and mlx-audio's STT models) hear
BLOCK_SECONDS = 5  # decoded and resampled at a time
_FIR_ZEROS = 64  # mlx-audio's resampler: a Kaiser sinc with 64 zero crossings per side
_FFMPEG_ONLY = {"m4a": "M4A/AAC", "webm": "WebM", "opus": "Ogg Opus"}
_ACCEPTED = "wav, mp3, flac or ogg (Vorbis)"


@dataclass(frozen=True)
class AudioFile:
    path: Path
    format: str
    sample_rate: int
    frames: int

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


def inspect_audio(path: Path, name: str) -> AudioFile:
    """The upload's format, sample rate and length; a 400 naming the problem when it is not
    audio this server can decode."""
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
    if info.num_frames <= 0 or info.sample_rate <= 0:
        raise _refuse(f"{name} holds no audio samples.")
    return AudioFile(path=path, format=kind, sample_rate=info.sample_rate, frames=info.num_frames)


def _native_blocks(audio: AudioFile, frames: int) -> Iterator[np.ndarray[Any, np.dtype[np.float32]]]:
    """Mono float32 at the file's own rate, about `frames` at a time."""
    stream = miniaudio.stream_file(
        str(audio.path),
        output_format=miniaudio.SampleFormat.FLOAT32,
        nchannels=1,
        sample_rate=audio.sample_rate,
        frames_to_read=frames,
    )
    try:
        for block in stream:
            yield np.frombuffer(block, dtype=np.float32)
    finally:
        stream.close()


def samples_16k(audio: AudioFile) -> Iterator[np.ndarray[Any, np.dtype[np.float32]]]:
    """The audio as 16 kHz mono float32 in blocks of about BLOCK_SECONDS; at most a few blocks
    are held at once, whatever the file's length."""
    rate = audio.sample_rate
    if rate == SAMPLE_RATE:
        yield from _native_blocks(audio, BLOCK_SECONDS * rate)
        return
    gcd = math.gcd(rate, SAMPLE_RATE)
    up, down = SAMPLE_RATE // gcd, rate // gcd
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
            yield _resampled(buffer, start, core_start, core_start + core, rate, halo)
            core_start += core
            drop = max(0, core_start - halo) - start
            buffer, start = buffer[drop:], start + drop
    end = start + len(buffer)
    while core_start < end:
        yield _resampled(buffer, start, core_start, min(end, core_start + core), rate, halo)
        core_start += core


def _resampled(
    buffer: np.ndarray[Any, np.dtype[np.float32]],
    start: int,
    core_start: int,
    core_end: int,
    rate: int,
    halo: int,
) -> np.ndarray[Any, np.dtype[np.float32]]:
    """Output samples of input frames [core_start, core_end), from the buffer starting at `start`."""
    # Imported here: it loads scipy.signal, ~1 s of every server start that transcribes nothing.
    from mlx_audio.resample import resample_audio_array

    gcd = math.gcd(rate, SAMPLE_RATE)
    up, down = SAMPLE_RATE // gcd, rate // gcd
    read_start = max(start, core_start - halo)
    segment = buffer[read_start - start : core_end + halo - start]
    converted = resample_audio_array(segment, rate, SAMPLE_RATE, axis=0)
    first = core_start * up // down - read_start * up // down
    count = math.ceil(core_end * up / down) - core_start * up // down
    return np.asarray(converted[first : first + count], dtype=np.float32)
