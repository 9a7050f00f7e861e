"""Uploaded audio decoded as Whisper hears it: the formats, the same samples as mlx-audio's own
reader, and memory that does not grow with the file's length."""

from __future__ import annotations

import tracemalloc
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
from mlx_audio.audio_io import read

from mlx_server.errors import APIError
from mlx_server.services.transcription.audio_input import SAMPLE_RATE, inspect_audio, samples_16k


def _decoded(path: Path) -> np.ndarray:
    return np.concatenate(list(samples_16k(inspect_audio(path, path.name))))


def test_wav_decodes_to_exactly_mlx_audios_16_khz_samples(fox_clip: Path) -> None:
    audio = inspect_audio(fox_clip, "fox.wav")
    assert (audio.format, audio.sample_rate) == ("wav", 22050)
    expected, _ = read(str(fox_clip), dtype="float32", sample_rate=SAMPLE_RATE, nchannels=1)
    assert np.array_equal(_decoded(fox_clip), expected)


@pytest.mark.parametrize(
    ("fmt", "subtype", "name"),
    [("FLAC", "PCM_16", "fox.flac"), ("OGG", "VORBIS", "fox.ogg"), ("MP3", "MPEG_LAYER_III", "fox.mp3")],
)
def test_flac_ogg_and_mp3_decode_to_the_same_speech(
    fox_clip: Path, tmp_path: Path, fmt: str, subtype: str, name: str
) -> None:
    samples, rate = sf.read(fox_clip, dtype="float32")
    target = tmp_path / name
    sf.write(target, samples, rate, format=fmt, subtype=subtype)
    reference, decoded = _decoded(fox_clip), _decoded(target)
    assert inspect_audio(target, name).format == name.rsplit(".", 1)[1]
    assert abs(len(decoded) - len(reference)) < 0.1 * SAMPLE_RATE  # mp3 pads a frame or two
    if fmt == "FLAC":
        assert np.array_equal(decoded, reference)  # lossless
    else:  # lossy: the same loudness, speech in the same places
        assert np.sqrt(np.mean(decoded**2)) == pytest.approx(np.sqrt(np.mean(reference**2)), rel=0.15)


def _peak_bytes_decoding(path: Path) -> tuple[int, float]:
    """Peak traced memory while decoding `path` block by block (nothing kept), and its seconds."""
    audio = inspect_audio(path, path.name)
    tracemalloc.start()
    total = sum(len(block) for block in samples_16k(audio))
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert total == pytest.approx(audio.duration * SAMPLE_RATE, abs=2)
    return peak, audio.duration


def test_decoding_memory_does_not_grow_with_the_files_length(tmp_path: Path) -> None:
    peaks = []
    for minutes in (2, 6):
        rate = 22050
        noise = np.random.default_rng(minutes).standard_normal(minutes * 60 * rate) * 0.1
        sf.write(tmp_path / f"{minutes}.wav", noise.astype(np.float32), rate, subtype="PCM_16")
        peaks.append(_peak_bytes_decoding(tmp_path / f"{minutes}.wav"))
    (short_peak, _), (long_peak, long_seconds) = peaks
    assert long_peak < 1.3 * short_peak, peaks  # three times the audio, about the same memory
    assert long_peak < long_seconds * SAMPLE_RATE * 4 / 4, peaks  # far below the decoded file


def test_an_ogg_opus_file_names_ffmpeg_when_it_is_missing(tmp_path: Path, fox_clip: Path) -> None:
    samples, rate = sf.read(fox_clip, dtype="float32")
    target = tmp_path / "voice.opus"
    sf.write(target, samples[: rate // 2], 48000, format="OGG", subtype="OPUS")
    with pytest.raises(APIError, match="Ogg Opus, which needs ffmpeg") as refused:
        inspect_audio(target, "voice.opus")
    assert refused.value.status == 400


def test_a_file_longer_than_the_limit_is_refused_from_its_header(fox_clip: Path) -> None:
    with pytest.raises(APIError, match=r"lasts 0:00:04 \(4 s\), longer than the 0:00:02 \(2 s\)") as refused:
        inspect_audio(fox_clip, "fox.wav", max_seconds=2)
    assert (refused.value.status, refused.value.code) == (400, "audio_too_long")


def test_decoding_stops_at_the_limit_whatever_the_header_said(fox_clip: Path) -> None:
    """A header that says less than the file holds (here: one second allowed of the 3.8 s it
    declares, as if it had said 1 s) does not let more through."""
    audio = replace(inspect_audio(fox_clip, "fox.wav"), max_frames=22050)
    blocks = samples_16k(audio)
    with pytest.raises(APIError, match=r"holds more than 0:00:01 \(1 s\) of audio") as refused:
        list(blocks)
    assert refused.value.status == 400
