"""Images attached to playground messages: checked and decoded by the server's image code,
stored once per content (named by their sha256) under the home directory's chat-images/, given
to the model as data: URLs, and removed when no message refers to them any more."""

from __future__ import annotations

import base64
import re
from pathlib import Path
from typing import Any

from sqlmodel import Session, col, select

from mlx_manager.records import ConversationMessage
from mlx_manager.services.forms import FormError
from mlx_server.facade import (
    ImageRejected,
    ModelCapabilities,
    ModelRecord,
    ModelType,
    decode_image_data,
    detect_model_type,
    get_server_settings,
)

MAX_IMAGES_PER_MESSAGE = 8
_EXTENSIONS = {"image/png": ".png", "image/jpeg": ".jpg", "image/webp": ".webp", "image/gif": ".gif"}
_SHA256 = re.compile(r"[0-9a-f]{64}")


def images_dir() -> Path:
    return get_server_settings().home_dir / "chat-images"


def store_images(uploads: list[tuple[str, bytes]]) -> list[dict[str, Any]]:
    """Check and keep the (filename, bytes) a message attaches; FormError names the file refused."""
    if len(uploads) > MAX_IMAGES_PER_MESSAGE:
        given = len(uploads)
        raise FormError(f"Attach at most {MAX_IMAGES_PER_MESSAGE} images to a message ({given} given).")
    stored: list[dict[str, Any]] = []
    for name, data in uploads:
        try:
            loaded = decode_image_data(data)
        except ImageRejected as exc:
            raise FormError(f"The image {name or '(unnamed)'} was refused: {exc}") from exc
        path = _path(loaded.sha256, loaded.media_type)
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            temporary = path.with_suffix(".part")
            temporary.write_bytes(data)
            temporary.replace(path)
        stored.append(
            {
                "sha256": loaded.sha256,
                "media_type": loaded.media_type,
                "width": loaded.width,
                "height": loaded.height,
            }
        )
    return stored


def image_file(sha256: str) -> tuple[Path, str] | None:
    """The stored file of an image and its media type, if there is one."""
    if not _SHA256.fullmatch(sha256):
        return None
    for media_type in _EXTENSIONS:
        path = _path(sha256, media_type)
        if path.is_file():
            return path, media_type
    return None


def data_url(image: dict[str, Any]) -> str | None:
    """The image as a data: URL (what the model and the exports get); None if its file is gone."""
    found = image_file(str(image.get("sha256", "")))
    if found is None:
        return None
    path, media_type = found
    return f"data:{media_type};base64,{base64.b64encode(path.read_bytes()).decode('ascii')}"


def remove_unreferenced(session: Session, candidates: set[str]) -> None:
    """Delete the files of these images unless a stored message still attaches them."""
    if not candidates:
        return
    query = select(ConversationMessage.images).where(col(ConversationMessage.images).is_not(None))
    in_use = {image.get("sha256") for images in session.exec(query) for image in images or []}
    for sha256 in candidates - in_use:
        found = image_file(sha256)
        if found is not None:
            found[0].unlink(missing_ok=True)


def attached(messages: list[ConversationMessage]) -> set[str]:
    return {str(image.get("sha256")) for message in messages for image in message.images or []}


def vision_model_ids(session: Session, models: list[ModelRecord]) -> set[str]:
    """The models that read images: as probed, or detected from the files of unprobed ones."""
    probed = {c.model_id: c.model_type for c in session.exec(select(ModelCapabilities))}
    return {
        model.id
        for model in models
        if (probed.get(model.id) or detect_model_type(Path(model.path))) == ModelType.VISION
    }


def _path(sha256: str, media_type: str) -> Path:
    return images_dir() / f"{sha256}{_EXTENSIONS[media_type]}"
