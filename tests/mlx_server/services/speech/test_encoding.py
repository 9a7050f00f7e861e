"""Speech encoders on a known signal: chunk by chunk, as a response streams, through the real
libsndfile (soundfile) and read back by miniaudio, a decoder that reads to the end of a stream."""

from __future__ import annotations

import io
import wave

import miniaudio
import numpy as np
import pytest

from mlx_server.errors import APIError
from mlx_server.services.speech.encoding import check_format, make_encoder, supported_formats

RATE = 24_000


def _tone(seconds: float) -> np.ndarray:
    t = np.arange(int(RATE * seconds)) / RATE
    return (0.5 * np.sin(2 * np.pi * 440 * t)).astype(np.float32)


def _stream(response_format: str, samples: np.ndarray, pieces: int = 4) -> list[bytes]:
    encoder = make_encoder(response_format, RATE)
    return [encoder.encode(part) for part in np.array_split(samples, pieces)] + [encoder.finish()]


def test_streamed_wav_is_its_header_then_the_samples_clipped_to_16_bits() -> None:
    samples = np.concatenate([_tone(0.5), np.array([2.0, -3.0, np.nan], dtype=np.float32)])
    chunks = _stream("wav", samples)
    assert chunks[0][:4] == b"RIFF" and all(chunks[1:4])  # audio from the first chunk on
    with wave.open(io.BytesIO(b"".join(chunks))) as reader:
        assert (reader.getframerate(), reader.getnchannels(), reader.getsampwidth()) == (RATE, 1, 2)
        decoded = np.frombuffer(reader.readframes(10**9), dtype="<i2")
    assert len(decoded) == len(samples)
    assert decoded[-3:].tolist() == [32767, -32767, 0]
    assert np.abs(decoded[:-3] / 32767 - samples[:-3]).max() < 1e-4
    pcm = b"".join(_stream("pcm", samples))
    assert pcm == b"".join(chunks)[44:]


@pytest.mark.parametrize(("response_format", "slack"), [("flac", 0), ("mp3", 0.1)])
def test_flac_and_mp3_stream_before_the_end_and_decode_whole(response_format: str, slack: float) -> None:
    samples = _tone(2.0)
    chunks = _stream(response_format, samples)
    assert all(chunks[:4]), [len(c) for c in chunks]  # bytes go out while audio still comes
    info = {"flac": miniaudio.flac_get_info, "mp3": miniaudio.mp3_get_info}[response_format]
    data = b"".join(chunks)
    assert info(data).sample_rate == RATE
    decoded = miniaudio.decode(data, nchannels=1, sample_rate=RATE)
    # The header's length fields were sent before the length was known; the audio is all there.
    assert decoded.num_frames / RATE == pytest.approx(2.0, abs=slack)
    assert max(abs(min(decoded.samples)), max(decoded.samples)) > 0.4 * 32767


def test_formats_without_an_encoder_are_refused_naming_the_ones_there_are() -> None:
    assert supported_formats(RATE) == ["wav", "pcm", "mp3", "flac", "opus"]
    assert "opus" not in supported_formats(22_050)
    with pytest.raises(APIError, match="no AAC encoder") as aac:
        check_format("aac", RATE)
    assert aac.value.status == 400 and aac.value.param == "response_format"
    with pytest.raises(APIError, match="Opus runs at"):
        check_format("opus", 22_050)
    opus = b"".join(_stream("opus", _tone(0.5)))
    assert opus[:4] == b"OggS" and b"OpusHead" in opus[:64]
