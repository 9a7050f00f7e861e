"""Saved system prompts for the playground, kept as one run-time setting (a list of presets)."""

from __future__ import annotations

from dataclasses import dataclass

from sqlmodel import Session

from mlx_server.facade import read_override, write_override

PRESETS_KEY = "chat_system_presets"
MAX_PRESETS = 50
MAX_NAME = 60
MAX_TEXT = 20_000


class PresetError(ValueError):
    """A preset was refused; the message says what to change."""


@dataclass(frozen=True)
class Preset:
    name: str
    text: str


def list_presets(session: Session) -> list[Preset]:
    stored = read_override(session, PRESETS_KEY)
    if not isinstance(stored, list):
        return []
    return [Preset(str(p["name"]), str(p["text"])) for p in stored if isinstance(p, dict) and "name" in p]


def save_preset(session: Session, name: str, text: str) -> Preset:
    """Add a preset, or replace the one with the same name."""
    name = " ".join(name.split())
    if not name or len(name) > MAX_NAME:
        raise PresetError(f"A preset needs a name of 1 to {MAX_NAME} characters.")
    if not text.strip():
        raise PresetError("A preset needs a system prompt; type it in the system prompt box first.")
    if len(text) > MAX_TEXT:
        raise PresetError(f"A system prompt preset is limited to {MAX_TEXT} characters.")
    presets = [p for p in list_presets(session) if p.name != name]
    if len(presets) >= MAX_PRESETS:
        raise PresetError(f"There are already {MAX_PRESETS} presets; delete one first.")
    preset = Preset(name, text)
    _store(session, sorted([*presets, preset], key=lambda p: p.name.lower()))
    return preset


def delete_preset(session: Session, name: str) -> None:
    _store(session, [p for p in list_presets(session) if p.name != name])


def _store(session: Session, presets: list[Preset]) -> None:
    write_override(session, PRESETS_KEY, [{"name": p.name, "text": p.text} for p in presets])
