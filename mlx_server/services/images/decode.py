"""Image bytes → an RGB PIL image: format sniffed from the bytes, size checked from the header
before any pixel is decoded, EXIF orientation applied, GIFs reduced to their first frame.
Decoded images are cached by the sha256 of their bytes, so a conversation that sends the same
image on every turn decodes it once."""

from __future__ import annotations

import hashlib
import io
import math
import threading
import warnings
from collections import OrderedDict
from dataclasses import dataclass

from PIL import Image, ImageOps, UnidentifiedImageError

# What Pillow reports for the formats vision models are given (OpenAI accepts the same four).
ACCEPTED_FORMATS = {"PNG": "image/png", "JPEG": "image/jpeg", "WEBP": "image/webp", "GIF": "image/gif"}


class ImageRejected(ValueError):
    """The image (or its URL) cannot be used; the message says why and what to send instead."""


@dataclass(frozen=True)
class LoadedImage:
    """A decoded image ready for a processor: RGB, upright, with the hash of its source bytes.
    Shared through the cache by every request sending these bytes: read it, never change it
    in place (fit_image and the processors make new images)."""

    image: Image.Image
    sha256: str
    media_type: str
    source_bytes: int

    @property
    def width(self) -> int:
        return self.image.width

    @property
    def height(self) -> int:
        return self.image.height


class DecodedImageCache:
    """Least-recently-used decoded images, bounded by their total pixels (RGB: 3 bytes each)."""

    def __init__(self, max_pixels: int) -> None:
        self.max_pixels = max_pixels
        self._images: OrderedDict[str, LoadedImage] = OrderedDict()
        self._pixels = 0
        self._lock = threading.Lock()

    def get(self, sha256: str) -> LoadedImage | None:
        with self._lock:
            found = self._images.get(sha256)
            if found is not None:
                self._images.move_to_end(sha256)
            return found

    def put(self, loaded: LoadedImage) -> None:
        size = loaded.width * loaded.height
        if size > self.max_pixels:
            return
        with self._lock:
            if loaded.sha256 in self._images:
                self._images.move_to_end(loaded.sha256)
                return
            self._images[loaded.sha256] = loaded
            self._pixels += size
            while self._pixels > self.max_pixels:
                _, dropped = self._images.popitem(last=False)
                self._pixels -= dropped.width * dropped.height

    def __len__(self) -> int:
        return len(self._images)

    def clear(self) -> None:
        with self._lock:
            self._images.clear()
            self._pixels = 0


# About 256 MB of RGB pixels: a few dozen photo-size images across the active conversations.
_cache = DecodedImageCache(max_pixels=85_000_000)


def get_image_cache() -> DecodedImageCache:
    return _cache


def decode_image(data: bytes, *, max_pixels: int) -> LoadedImage:
    """Decode PNG, JPEG, WebP or GIF bytes (from the cache when these bytes were seen before)."""
    digest = hashlib.sha256(data).hexdigest()
    cached = _cache.get(digest)
    if cached is not None:
        _check_pixels(cached.width, cached.height, max_pixels)  # decoded under another limit
        return cached
    loaded = _decode(data, digest, max_pixels=max_pixels)
    _cache.put(loaded)
    return loaded


def _decode(data: bytes, digest: str, *, max_pixels: int) -> LoadedImage:
    # Image.open reads only the header; the pixel check happens before load() decodes anything.
    # Pillow's own bomb check would warn (or raise at twice its limit); ours comes first.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", Image.DecompressionBombWarning)
        try:
            opened = Image.open(io.BytesIO(data), formats=list(ACCEPTED_FORMATS))
        except Image.DecompressionBombError as error:  # beyond twice Pillow's own limit
            raise ImageRejected(
                f"The image is over the limit of {max_pixels:,} pixels ({error}); send a smaller image."
            ) from error
        except UnidentifiedImageError as error:
            raise ImageRejected(
                f"The image data is not a PNG, JPEG, WebP or GIF image ({_describe(data)}); "
                "send one of those formats."
            ) from error
        with opened:
            _check_pixels(*opened.size, max_pixels)
            media_type = ACCEPTED_FORMATS[str(opened.format)]
            try:
                opened.seek(0)  # the first frame of an animated GIF or WebP
                upright = ImageOps.exif_transpose(opened)
                rgb = upright.convert("RGB")
            except (OSError, ValueError, SyntaxError) as error:
                raise ImageRejected(
                    f"The {media_type} image is damaged and could not be decoded ({error}); "
                    "send a complete image file."
                ) from error
    return LoadedImage(image=rgb, sha256=digest, media_type=media_type, source_bytes=len(data))


def _check_pixels(width: int, height: int, max_pixels: int) -> None:
    if width * height > max_pixels:
        raise ImageRejected(
            f"The image is {width}x{height} pixels ({width * height:,}), over the limit of "
            f"{max_pixels:,} pixels; send a smaller image."
        )


def _describe(data: bytes) -> str:
    head = data[:64].lstrip().lower()
    if head.startswith((b"<!doctype html", b"<html")):
        return "it looks like an HTML page"
    if head.startswith((b"{", b"[")):
        return "it looks like JSON"
    return f"{len(data):,} bytes starting {data[:8].hex(' ')}" if data else "it is empty"


def fit_image(
    image: Image.Image, *, max_pixels: int | None = None, max_side: int | None = None, multiple_of: int = 1
) -> Image.Image:
    """Shrink (never enlarge) keeping the aspect ratio so the image fits `max_pixels` and
    `max_side`, with both sides rounded to `multiple_of` (e.g. the 28-pixel patches of
    Qwen2.5-VL). The same image is returned when nothing needs to change."""
    width, height = image.size
    scale = 1.0
    if max_pixels is not None and width * height > max_pixels:
        scale = math.sqrt(max_pixels / (width * height))
    if max_side is not None and max(width, height) * scale > max_side:
        scale = max_side / max(width, height)
    new_width = _round_to(width * scale, multiple_of, scale < 1.0)
    new_height = _round_to(height * scale, multiple_of, scale < 1.0)
    too_many = max_pixels is not None and new_width * new_height > max_pixels
    if too_many or (max_side is not None and max(new_width, new_height) > max_side):
        new_width = _round_to(width * scale, multiple_of, True)  # rounding up overshot a limit
        new_height = _round_to(height * scale, multiple_of, True)
    if (new_width, new_height) == (width, height):
        return image
    return image.resize((new_width, new_height), Image.Resampling.BICUBIC)


def _round_to(length: float, multiple: int, shrinking: bool) -> int:
    # Shrinking rounds down so the limits still hold; otherwise to the nearest multiple.
    steps = math.floor(length / multiple) if shrinking else round(length / multiple)
    return max(multiple, steps * multiple)
