"""Whisper beam search against greedy through /v1/audio/transcriptions: time and word errors.

One server (`mlx-manager serve` on a fresh home, whisper tiny.en as it imports it), two clips
espeak-ng speaks: the transcription benchmark's minute (transcription.py) and SENTENCES, short
sentences spoken in one go, faster (the beam-search test's set). Each clip is posted with `beam_size=1`
(greedy) and `beam_size=5` in alternating runs; the median real-time factor (seconds of audio
per second of wall time) and the word error rate of each are reported.

    python -m mlx_server.benchmark.transcription_beams [--runs 2] [--write docs/benchmarks.md]
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path

import httpx

from mlx_server.benchmark._server import running_server
from mlx_server.benchmark.report import bench_arguments, publish, run_line
from mlx_server.benchmark.transcription import MINUTE, MODEL, speak, word_error_rate

START, END = "<!-- transcription-beams:start -->", "<!-- transcription-beams:end -->"
BEAMS = (1, 5)
# Short sentences espeak-ng speaks in one go at SENTENCES_RATE words a minute (about 46 s, two
# windows): tongue twisters and plain ones, where tiny.en's greedy text slips on several.
SENTENCES = (
    "She sells sea shells by the sea shore.",
    "Peter Piper picked a peck of pickled peppers.",
    "A stitch in time saves nine.",
    "Fresh bread smells wonderful.",
    "The old clock struck twelve.",
    "Bright stars filled the sky.",
    "My grandmother knits thick scarves.",
    "Seven swans swam slowly.",
    "Six thick thistle sticks.",
    "The museum opens on Saturdays.",
    "He painted the fence bright green.",
    "Please bring your umbrella.",
    "Our train leaves at seven.",
    "The pilot announced a delay.",
    "The library closes at nine.",
    "Thunder rumbled over the hills.",
    "The chef sliced the onions.",
    "The farmer sold ripe tomatoes.",
    "Keep the receipt.",
    "The children built a sandcastle.",
    "A gentle breeze rustled the leaves.",
    "The rain in Spain stays mainly in the plain.",
)
SPOKEN = " ".join(SENTENCES)
SENTENCES_RATE = 160


def hear(client: httpx.Client, clip: Path, beam_size: int) -> tuple[str, float]:
    """The clip's text with `beam_size` beams, and the wall time it took."""
    started = time.perf_counter()
    with clip.open("rb") as f:
        data = {"model": MODEL, "beam_size": str(beam_size)}
        response = client.post("/v1/audio/transcriptions", data=data, files={"file": f})
    response.raise_for_status()
    return str(response.json()["text"]), time.perf_counter() - started


Figures = dict[int, tuple[float, float]]  # beam size -> (median real-time factor, word error rate)


def measure(url: str, clip: Path, reference: str, seconds: float, runs: int) -> Figures:
    """Per beam size: (median real-time factor, word error rate of the last run's text)."""
    client = httpx.Client(base_url=url, timeout=3600)
    factors: dict[int, list[float]] = {beam: [] for beam in BEAMS}
    errors: dict[int, float] = {}
    for run in range(runs):
        for beam in BEAMS:  # alternating, so drift affects both
            text, wall = hear(client, clip, beam)
            factors[beam].append(seconds / wall)
            errors[beam] = word_error_rate(reference, text)
        shown = ", ".join(f"beam {beam} {f[-1]:.2f}x real time" for beam, f in factors.items())
        print(f"{clip.name} run {run + 1}: {shown}", flush=True)
    return {beam: (statistics.median(factors[beam]), errors[beam]) for beam in BEAMS}


def report(results: dict[str, tuple[float, Figures]], runs: int) -> str:
    lines = [
        f"{run_line()}",
        f"Model {MODEL}, espeak-ng clips (WAV, 22.05 kHz), "
        + (f"{runs} alternating runs, medians." if runs > 1 else "1 run.")
        + " Real-time factor (seconds of audio per second of wall time) and word error rate:",
        "",
        "| clip | greedy RTF | beam 5 RTF | beam 5 / greedy time | greedy WER | beam 5 WER |",
        "|---|---|---|---|---|---|",
    ]
    for name, (seconds, by_beam) in results.items():
        (greedy, greedy_wer), (beam, beam_wer) = by_beam[1], by_beam[5]
        lines.append(
            f"| {name} ({seconds:.1f} s) | {greedy:.2f} | {beam:.2f} | {greedy / beam:.2f}x "
            f"| {greedy_wer:.1%} | {beam_wer:.1%} |"
        )
    return "\n".join(lines)


def main() -> None:
    args = bench_arguments(__doc__, "write the section into this Markdown file", runs=2)
    import miniaudio

    results: dict[str, tuple[float, Figures]] = {}
    with tempfile.TemporaryDirectory(prefix="mlx-bench-beams-") as tmp:
        home = Path(tmp) / "home"
        home.mkdir()
        clips = {
            "a minute of narration": (MINUTE, speak(MINUTE, Path(tmp) / "minute.wav")),
            f"{len(SENTENCES)} short sentences": (
                SPOKEN,
                speak(SPOKEN, Path(tmp) / "sentences.wav", rate=SENTENCES_RATE),
            ),
        }
        with running_server(home) as url:
            hear(httpx.Client(base_url=url, timeout=600), clips["a minute of narration"][1], 1)  # warm-up
            for name, (reference, clip) in clips.items():
                seconds = float(miniaudio.get_file_info(str(clip)).duration)
                results[name] = (seconds, measure(url, clip, reference, seconds, args.runs))
    publish(report(results, args.runs), args.write, "Speech to text: beam search", START, END)


if __name__ == "__main__":
    main()
