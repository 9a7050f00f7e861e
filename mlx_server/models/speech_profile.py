"""What a loaded text-to-speech model offers a request: its sample rate and its voices.

mlx-audio's TTS families keep voices in different places: KittenTTS loads named style vectors
from `voices.npz` into `model.voices` (with `voice_aliases`), Kokoro-style directories keep one
file per voice under `voices/`. A model whose voices cannot be listed takes the voice the
request names as it is, and its own error says when it does not know it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

_VOICE_FILE_SUFFIXES = (".safetensors", ".pt", ".npy", ".bin")


def _listed_voices(model: Any, path: Path) -> tuple[str, ...]:
    names: set[str] = set()
    loaded = getattr(model, "voices", None)
    if isinstance(loaded, dict):
        names.update(str(name) for name in loaded)
    aliases = getattr(model, "voice_aliases", None)
    if isinstance(aliases, dict):
        names.update(str(name) for name in aliases)
    voice_dir = path / "voices"
    if voice_dir.is_dir():
        names.update(f.stem for f in voice_dir.iterdir() if f.suffix in _VOICE_FILE_SUFFIXES)
    return tuple(sorted(names))


@dataclass(frozen=True)
class SpeechProfile:
    sample_rate: int
    # Empty when the model does not list its voices (the request's voice is passed through).
    voices: tuple[str, ...]

    @classmethod
    def read(cls, model: Any, path: Path) -> SpeechProfile:
        return cls(sample_rate=int(model.sample_rate), voices=_listed_voices(model, path))
