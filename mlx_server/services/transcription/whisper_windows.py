"""Whisper's long-form loop, one 30 s window per step: each window is one job on the MLX thread.

mlx-audio's `Whisper.generate` hears a whole array in one call, window after window, seeking
each time to the end of the last complete segment (the loop of openai/whisper's `transcribe`).
One call was one MLX job, so a long piece held the thread for many windows (chats waited for
all of them), and cutting the audio into 30 s pieces instead made every piece pay for a second
window (its tail, padded) and hear its cut last segment again. This is the same loop with us
holding its state between windows: the window starts at Whisper's seek, the text so far is the
next window's prompt, and the temperature ladder, the no-speech skip, the timestamp-token
segments and word timings are Whisper's. At temperature 0 a window is heard greedily or, with
`beam_size` > 1, by beam search (`beam_search.py`); the ladder's higher rungs sample one text
each. What it leaves out, since no request asks for it: clip timestamps, hallucination-silence
skipping, best-of-N sampling on the higher rungs.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import mlx.core as mx
import numpy as np

from mlx_server.services.transcription.beam_search import beam_decode

Samples = np.ndarray[Any, np.dtype[np.float32]]

# Whisper's input: 16 kHz samples, a mel frame every 160 (10 ms), 30 s windows of 3000 frames.
SAMPLE_RATE = 16000
HOP_LENGTH = 160
N_FFT = 400
N_SAMPLES = 30 * SAMPLE_RATE
N_FRAMES = N_SAMPLES // HOP_LENGTH
FRAMES_PER_SECOND = SAMPLE_RATE // HOP_LENGTH
LADDER = (0.0, 0.2, 0.4, 0.6, 0.8, 1.0)  # temperatures tried in turn when a window's text fails
REPETITIVE_RATIO = 2.4  # gzip compression ratio above which the text repeats itself
UNSURE_LOGPROB = -1.0  # mean token log probability below which the text is a guess
NO_SPEECH_PROB = 0.6  # above it (and unsure), the window is silence and is skipped
HIGH_TEMPERATURE = 0.5  # text found above it does not prompt the next window
TOKEN_FRAMES = 2  # mel frames per audio token (the encoder's stride-2 convolution)
SECONDS_PER_TOKEN = TOKEN_FRAMES * HOP_LENGTH / SAMPLE_RATE  # a timestamp token's step: 0.02 s


class SampleReader:
    """16 kHz samples arriving in blocks, read as windows that only move forward: what lies
    before a window is dropped, so at most a window and a block are held."""

    def __init__(self, blocks: Iterator[Samples]) -> None:
        self._blocks = blocks
        self._buffer: Samples = np.empty(0, dtype=np.float32)
        self._start = 0  # the index of _buffer[0] in the audio
        self._exhausted = False

    def read(self, first: int, count: int) -> Samples:
        """Samples [first, first + count) of the audio; fewer at its end."""
        drop = min(max(0, first - self._start), len(self._buffer))
        self._buffer, self._start = self._buffer[drop:], self._start + drop
        parts, held = [self._buffer], self._start + len(self._buffer)
        while held < first + count and not self._exhausted:
            block = next(self._blocks, None)
            self._exhausted = block is None
            if block is not None:
                parts.append(block)
                held += len(block)
        self._buffer = np.concatenate(parts)
        return self._buffer[first - self._start : first - self._start + count]


@dataclass
class WhisperWindows:
    """A Whisper model hearing `samples` window by window (call `next_window` on the MLX thread).

    `language` "" is detected from the first window (multilingual models); `temperature` None
    is the ladder; `prompt` conditions the first window like the text heard conditions the next.
    """

    model: Any
    samples: SampleReader
    task: str = "transcribe"
    language: str = ""
    temperature: float | None = None
    prompt: str | None = None
    words: bool = False
    beam_size: int = 1  # 1: greedy
    patience: float = 1.0  # beam search ends once round(beam_size * patience) texts finished
    seek: int = 0  # mel frames heard (10 ms each)
    tokens: list[int] = field(default_factory=list)  # the prompt's, then every text token heard
    prompt_from: int = 0  # the next window's prompt: tokens[prompt_from:]
    last_speech: float = 0.0  # seconds: where the last word ended (word timings)
    _tokenizer: Any = None

    def next_window(self) -> list[dict[str, Any]] | None:
        """The segments of the window at `seek`, times in seconds of the audio ([] if it was
        silence); None once the audio is over."""
        # mlx-audio's Whisper modules are imported when audio is first heard, not at server start.
        from mlx_audio.stt.models.whisper.audio import log_mel_spectrogram, pad_or_trim

        window = self.samples.read(self.seek * HOP_LENGTH, N_SAMPLES + N_FFT)  # + the STFT's reach
        mel = log_mel_spectrogram(mx.array(window), n_mels=self.model.dims.n_mels, padding=N_SAMPLES)
        frames = min(N_FRAMES, mel.shape[-2] - N_FRAMES)
        if frames <= 0:
            return None
        mel = pad_or_trim(mel[:frames], N_FRAMES, axis=-2).astype(self.model.dtype)
        tokenizer = self._tokenizer or self._start(mel)
        offset = self.seek * HOP_LENGTH / SAMPLE_RATE
        result = self._decode(mel)
        if result.no_speech_prob > NO_SPEECH_PROB and not result.avg_logprob > UNSURE_LOGPROB:
            self.seek += frames
            return []
        segments, single_ending = self._segments(result, tokenizer, offset, frames)
        if self.words:
            self._time_words(segments, tokenizer, mel, frames, offset, single_ending)
        for segment in segments:  # an instant or a blank is kept, emptied, as Whisper keeps it
            if segment["start"] == segment["end"] or not segment["text"].strip():
                segment.update(text="", tokens=[], words=[])
        self.tokens += [token for segment in segments for token in segment["tokens"]]
        if result.temperature > HIGH_TEMPERATURE:
            self.prompt_from = len(self.tokens)
        return segments

    def _start(self, mel: mx.array) -> Any:
        """The language (detected from the first window if not given) and its tokenizer."""
        if not self.language:
            if self.model.is_multilingual:
                _, probabilities = self.model.detect_language(mel)
                self.language = str(max(probabilities, key=probabilities.get))
            else:
                self.language = "en"
        self._tokenizer = self.model.get_tokenizer(language=self.language, task=self.task)
        if self.prompt:
            self.tokens = list(self._tokenizer.encode(" " + self.prompt.strip()))
        return self._tokenizer

    def _decode(self, mel: mx.array) -> Any:
        """The window decoded (a DecodingResult) at the first temperature whose text is neither
        repetitive nor a guess (or is silence); the last one's if none is."""
        from mlx_audio.stt.models.whisper.decoding import DecodingOptions

        ladder = LADDER if self.temperature is None else (self.temperature,)
        for temperature in ladder:
            options = DecodingOptions(
                task=self.task,
                language=self.language,
                temperature=temperature,
                prompt=self.tokens[self.prompt_from :],
                fp16=self.model.dtype == mx.float16,
            )
            if temperature == 0 and self.beam_size > 1:
                result = beam_decode(self.model, mel, options, self.beam_size, self.patience)
            else:
                result = self.model.decode(mel, options)
            unsure = result.avg_logprob < UNSURE_LOGPROB
            silence = result.no_speech_prob > NO_SPEECH_PROB and unsure
            if silence or not (result.compression_ratio > REPETITIVE_RATIO or unsure):
                break
        return result

    def _segments(
        self, result: Any, tokenizer: Any, offset: float, frames: int
    ) -> tuple[list[dict[str, Any]], bool]:
        """The window's segments, cut at pairs of timestamp tokens; `seek` moves to the end of
        the last complete one (or past the window when the text ends on a lone timestamp)."""
        tokens = np.array(result.tokens, dtype=np.int64)
        first_stamp = tokenizer.timestamp_begin
        stamps = tokens >= first_stamp
        single_ending = stamps[-2:].tolist() == [False, True]
        cuts = (np.flatnonzero(stamps[:-1] & stamps[1:]) + 1).tolist()

        seek = self.seek  # the window's start, which word timings count from

        def segment(part: Any, start: float, end: float) -> dict[str, Any]:
            ids = [int(token) for token in part]
            return {
                "seek": seek,
                "start": start,
                "end": end,
                "text": tokenizer.decode([token for token in ids if token < tokenizer.eot]),
                "tokens": ids,
                "temperature": result.temperature,
                "avg_logprob": result.avg_logprob,
                "compression_ratio": result.compression_ratio,
                "no_speech_prob": result.no_speech_prob,
            }

        if not cuts:  # one segment: the window, or up to its only timestamp
            end = frames * HOP_LENGTH / SAMPLE_RATE
            times = tokens[stamps]
            if len(times) and times[-1] != first_stamp:
                end = (times[-1] - first_stamp) * SECONDS_PER_TOKEN
            self.seek += frames
            return [segment(tokens, offset, offset + end)], single_ending
        segments, last = [], 0
        for cut in cuts + ([len(tokens)] if single_ending else []):
            part = tokens[last:cut]
            start, end = ((part[i] - first_stamp) * SECONDS_PER_TOKEN for i in (0, -1))
            segments.append(segment(part, offset + start, offset + end))
            last = cut
        self.seek += frames if single_ending else int(tokens[last - 1] - first_stamp) * TOKEN_FRAMES
        return segments, single_ending

    def _time_words(
        self,
        segments: list[dict[str, Any]],
        tokenizer: Any,
        mel: mx.array,
        frames: int,
        offset: float,
        single_ending: bool,
    ) -> None:
        """Word timings from the cross-attention (Whisper's DTW); the next window starts after
        the last word when the text did not end on a lone timestamp."""
        from mlx_audio.stt.models.whisper.timing import add_word_timestamps

        add_word_timestamps(
            segments=segments,
            model=self.model,
            tokenizer=tokenizer,
            mel=mel,
            num_frames=frames,
            last_speech_timestamp=self.last_speech,
        )
        ends = [word["end"] for segment in segments for word in segment.get("words") or []]
        last_end = ends[-1] if ends else (segments[-1]["end"] if segments else None)
        if last_end is None:
            return
        if not single_ending and last_end > offset:
            self.seek = round(last_end * FRAMES_PER_SECOND)
        self.last_speech = last_end
