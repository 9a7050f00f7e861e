"""Audio as it is generated, encoded into the file format a speech request asked for.

Each encoder turns float samples into bytes chunk by chunk, so a response streams while the
model is still speaking. `wav` and `pcm` are 16-bit little-endian samples (a WAV header comes
first, its sizes set to the streaming value 0xFFFFFFFF because the length is not known yet, as
OpenAI's streamed WAV does). `flac`, `mp3` and `opus` (in Ogg) are encoded by libsndfile
through soundfile. libsndfile rewrites a few header fields when it closes a file (FLAC's total
sample count, MP3's Xing frame count); those bytes have already been sent, so the streamed
file keeps the values meaning "unknown length", which decoders that read to the end of the
stream (browsers, ffmpeg, miniaudio) accept.
"""

from __future__ import annotations

import struct
from typing import Any, Protocol

import numpy as np
import soundfile

from mlx_server.errors import APIError

# OpenAI's response_format values and their MIME types.
MEDIA_TYPES = {
    "mp3": "audio/mpeg",
    "opus": "audio/ogg",
    "aac": "audio/aac",
    "flac": "audio/flac",
    "wav": "audio/wav",
    "pcm": "audio/pcm",
}
# libsndfile's (format, subtype) for the formats it encodes.
_LIBSNDFILE = {"flac": ("FLAC", "PCM_16"), "mp3": ("MP3", "MPEG_LAYER_III"), "opus": ("OGG", "OPUS")}
# Ogg Opus runs at these rates only (RFC 7845); libsndfile refuses any other.
_OPUS_RATES = (8000, 12000, 16000, 24000, 48000)

Samples = np.ndarray[Any, np.dtype[np.float32]]


class AudioEncoder(Protocol):
    def encode(self, samples: Samples) -> bytes:
        """Bytes for the next samples (mono float32 in [-1, 1]); the first call includes any header."""

    def finish(self) -> bytes:
        """The last bytes: buffered frames and trailers."""


def _int16(samples: Samples) -> bytes:
    clipped = np.clip(np.nan_to_num(samples, nan=0.0), -1.0, 1.0)
    return (clipped * 32767).astype("<i2").tobytes()


def wav_header(sample_rate: int) -> bytes:
    """A 16-bit mono PCM WAV header whose RIFF and data sizes say "streaming, length unknown"."""
    unknown = 0xFFFFFFFF
    byte_rate = sample_rate * 2
    return (
        struct.pack("<4sI4s", b"RIFF", unknown, b"WAVE")
        + struct.pack("<4sIHHIIHH", b"fmt ", 16, 1, 1, sample_rate, byte_rate, 2, 16)
        + struct.pack("<4sI", b"data", unknown)
    )


class PcmEncoder:
    def __init__(self, sample_rate: int, *, header: bool) -> None:
        self._pending = wav_header(sample_rate) if header else b""

    def encode(self, samples: Samples) -> bytes:
        out, self._pending = self._pending + _int16(samples), b""
        return out

    def finish(self) -> bytes:
        out, self._pending = self._pending, b""
        return out


class _StreamSink:
    """The file-like object libsndfile writes to. Bytes are handed on as they come and then
    dropped; a later write over bytes already handed on (a header update at close) is ignored."""

    def __init__(self) -> None:
        self.pending = bytearray()
        self.sent = 0  # file offset of pending[0]
        self.position = 0

    def write(self, chunk: bytes) -> int:
        start, end = self.position, self.position + len(chunk)
        self.position = end
        if end <= self.sent:
            return len(chunk)
        view = bytes(chunk)[max(self.sent - start, 0) :]
        offset = max(start - self.sent, 0)
        if offset + len(view) > len(self.pending):
            self.pending.extend(bytes(offset + len(view) - len(self.pending)))
        self.pending[offset : offset + len(view)] = view
        return len(chunk)

    def seek(self, offset: int, whence: int = 0) -> int:
        base = (0, self.position, self.sent + len(self.pending))[whence]
        self.position = base + offset
        return self.position

    def tell(self) -> int:
        return self.position

    def read(self, size: int = -1) -> bytes:
        return b""  # write-only: libsndfile does not read back what it wrote

    def take(self) -> bytes:
        out = bytes(self.pending)
        self.sent += len(out)
        self.pending.clear()
        return out


class LibsndfileEncoder:
    def __init__(self, response_format: str, sample_rate: int) -> None:
        container, subtype = _LIBSNDFILE[response_format]
        self._sink = _StreamSink()
        self._file = soundfile.SoundFile(
            self._sink, mode="w", samplerate=sample_rate, channels=1, format=container, subtype=subtype
        )

    def encode(self, samples: Samples) -> bytes:
        self._file.write(np.clip(np.nan_to_num(samples, nan=0.0), -1.0, 1.0))
        return self._sink.take()

    def finish(self) -> bytes:
        self._file.close()
        return self._sink.take()


def check_format(response_format: str, sample_rate: int) -> None:
    """Refuse a format this server cannot encode for this model, saying which ones it can."""
    if response_format in ("wav", "pcm"):
        return
    if response_format in _LIBSNDFILE and _LIBSNDFILE[response_format][0] in soundfile.available_formats():
        if response_format != "opus" or sample_rate in _OPUS_RATES:
            return
        reason = (
            f"Opus runs at {', '.join(map(str, _OPUS_RATES))} Hz and this model speaks at {sample_rate} Hz"
        )
    elif response_format == "aac":
        reason = "no AAC encoder is available here (libsndfile has none)"
    else:
        reason = f"this server's libsndfile ({soundfile.__libsndfile_version__}) cannot write it"
    raise APIError(
        400,
        f"response_format {response_format!r} is not available: {reason}. "
        f"Use one of {', '.join(supported_formats(sample_rate))}.",
        param="response_format",
        code="unsupported_response_format",
    )


def supported_formats(sample_rate: int) -> list[str]:
    names = ["wav", "pcm"]
    for name in ("mp3", "flac", "opus"):
        container = _LIBSNDFILE[name][0]
        if container in soundfile.available_formats() and (name != "opus" or sample_rate in _OPUS_RATES):
            names.append(name)
    return names


def make_encoder(response_format: str, sample_rate: int) -> AudioEncoder:
    """The encoder for a format `check_format` accepted."""
    if response_format in ("wav", "pcm"):
        return PcmEncoder(sample_rate, header=response_format == "wav")
    return LibsndfileEncoder(response_format, sample_rate)
