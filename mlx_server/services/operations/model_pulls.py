"""Ollama's /api/pull on the hub downloads of whoever can download: the manager installs its
download manager's progress here (`set_model_puller`) while it runs; the standalone server has
no download manager, so /api/pull there says so and what to run instead.

Names: `org/name` and `hf.co/org/name` are Hugging Face repo ids (Ollama's own `hf.co/` form);
`:latest` is dropped; any other tag (Ollama picks a GGUF quantization with it) is refused
with what to send instead, since a repo here is one MLX model.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Callable
from dataclasses import dataclass
from typing import Literal

from mlx_server.errors import APIError

HF_PREFIXES = ("hf.co/", "huggingface.co/")
PullStatus = Literal["queued", "running", "completed", "failed", "cancelled"]


@dataclass(frozen=True)
class PullProgress:
    """One update of a pull: a download job's state, or a refusal (`error` with its status)."""

    status: PullStatus
    bytes_done: int = 0
    bytes_total: int | None = None
    model_id: str | None = None
    error: str | None = None
    error_status: int = 500


Puller = Callable[[str], AsyncGenerator[PullProgress, None]]
_puller: Puller | None = None


def set_model_puller(puller: Puller | None) -> None:
    """Install (or, with None, remove) what downloads a hub repo for /api/pull."""
    global _puller
    _puller = puller


def model_puller() -> Puller:
    if _puller is None:
        raise APIError(
            400,  # the request cannot be served here; a 5xx would say the server failed
            "This server cannot download models: /api/pull uses the dashboard's download manager, "
            "which runs with `mlx-manager serve` (not the standalone mlx-server). Download there, "
            "or import a model directory or GGUF file with `mlx-manager models`.",
            code="pull_unavailable",
        )
    return _puller


def hub_repo_id(name: str) -> str:
    """The Hugging Face repo id an Ollama model name means, or a 400 saying what to send."""
    repo = name.strip()
    for prefix in HF_PREFIXES:
        repo = repo.removeprefix(prefix)
    repo, _, tag = repo.partition(":")
    if tag and tag != "latest":
        raise APIError(
            400,
            f"The tag {tag!r} selects a GGUF quantization on Ollama's registry; here a model is one "
            "Hugging Face repo (an MLX model, e.g. mlx-community/Qwen3-4B-4bit): pull that repo id.",
            param="model",
        )
    if repo.count("/") != 1:
        raise APIError(
            400,
            f"{name!r} is not a Hugging Face repo id: pull 'org/name' or 'hf.co/org/name' "
            "(e.g. mlx-community/SmolLM2-135M-Instruct-4bit); this server has no Ollama registry.",
            param="model",
        )
    return repo
