"""Images for vision requests: `load_image(url)` turns a data: or http(s) URL into a decoded,
upright RGB image, fetching safely (fetch.py) and decoding once per distinct image (decode.py)."""

from __future__ import annotations

import asyncio
import base64
import binascii

from mlx_server.config import get_settings
from mlx_server.services.images.decode import (
    ACCEPTED_FORMATS,
    DecodedImageCache,
    ImageRejected,
    LoadedImage,
    decode_image,
    fit_image,
    get_image_cache,
)
from mlx_server.services.images.fetch import FetchPolicy, fetch_image_bytes

__all__ = [
    "ACCEPTED_FORMATS",
    "DecodedImageCache",
    "FetchPolicy",
    "ImageRejected",
    "LoadedImage",
    "decode_base64_image",
    "decode_image_data",
    "fit_image",
    "get_image_cache",
    "load_image",
]


async def load_image(url: str, *, policy: FetchPolicy | None = None) -> LoadedImage:
    """Decode the image a `data:` URL carries or an http(s) URL serves (fetched under `policy`,
    the server's settings by default). Raises ImageRejected (a ValueError) saying why."""
    limits = policy or FetchPolicy.from_settings(get_settings())
    # Base64 and decoding take up to a second for a large photo: off the event loop.
    if url[:5].lower() == "data:":
        return await asyncio.to_thread(
            lambda: decode_image(_data_url_bytes(url, limits.max_bytes), max_pixels=limits.max_pixels)
        )
    data = await fetch_image_bytes(url, limits)
    return await asyncio.to_thread(decode_image, data, max_pixels=limits.max_pixels)


def decode_base64_image(payload: str, *, policy: FetchPolicy | None = None) -> LoadedImage:
    """Decode base64 image data (Anthropic's `base64` source) under the policy's limits."""
    policy = policy or FetchPolicy.from_settings(get_settings())
    return decode_image(_base64_bytes(payload, policy.max_bytes), max_pixels=policy.max_pixels)


def decode_image_data(data: bytes, *, policy: FetchPolicy | None = None) -> LoadedImage:
    """Decode image bytes (an upload) under the policy's size and pixel limits."""
    policy = policy or FetchPolicy.from_settings(get_settings())
    if len(data) > policy.max_bytes:
        raise ImageRejected(_too_large(policy.max_bytes))
    return decode_image(data, max_pixels=policy.max_pixels)


def _data_url_bytes(url: str, max_bytes: int) -> bytes:
    header, comma, payload = url.partition(",")
    if not comma or not header.lower().endswith(";base64"):
        raise ImageRejected(
            "An image data: URL must be base64, like data:image/png;base64,iVBORw0KGgo... "
            f"(got {header[:60]!r})."
        )
    return _base64_bytes(payload, max_bytes)


def _base64_bytes(payload: str, max_bytes: int) -> bytes:
    # Four base64 characters carry three bytes: refuse before decoding anything too large.
    if len(payload) * 3 // 4 > max_bytes + 3:
        raise ImageRejected(_too_large(max_bytes))
    try:
        data = base64.b64decode("".join(payload.split()), validate=True)
    except (binascii.Error, ValueError) as error:
        raise ImageRejected(f"The image data is not valid base64 ({error}).") from error
    if len(data) > max_bytes:
        raise ImageRejected(_too_large(max_bytes))
    return data


def _too_large(max_bytes: int) -> str:
    return f"The image data is larger than the limit of {max_bytes:,} bytes; send a smaller image."
