"""Decoding with Pillow: the four formats, EXIF rotation, first GIF frame, decompression bombs
refused from the header, data: URLs, the decoded-image cache and fitting to a model's size."""

from __future__ import annotations

import asyncio
import base64
import io
import struct
import time
import zlib

import pytest
from PIL import Image

from mlx_server.services.images import (
    DecodedImageCache,
    ImageRejected,
    LoadedImage,
    decode_base64_image,
    fit_image,
    get_image_cache,
    load_image,
)
from mlx_server.services.images.decode import decode_image


def encoded(image: Image.Image, fmt: str, **options: object) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, fmt, **options)
    return buffer.getvalue()


def data_url(data: bytes, media_type: str = "image/png") -> str:
    return f"data:{media_type};base64,{base64.b64encode(data).decode()}"


def load(url: str) -> LoadedImage:
    return asyncio.run(load_image(url))


def png_bomb(width: int, height: int) -> bytes:
    """A real 1-bit grey PNG of width x height zeros: ~500 KB of file for 900 megapixels."""

    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    compressor = zlib.compressobj(1)
    rows = bytes(1 + (width + 7) // 8) * 1000
    pixels = b"".join(compressor.compress(rows) for _ in range(height // 1000)) + compressor.flush()
    header = struct.pack(">IIBBBBB", width, height, 1, 0, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", pixels) + chunk(b"IEND", b"")


@pytest.mark.parametrize(
    ("fmt", "media_type"),
    [("PNG", "image/png"), ("JPEG", "image/jpeg"), ("WEBP", "image/webp"), ("GIF", "image/gif")],
)
def test_decodes_each_format_to_rgb_sniffed_from_the_bytes(fmt: str, media_type: str) -> None:
    source = encoded(Image.new("RGB", (48, 20), (200, 30, 30)), fmt)
    # The data: URL's declared type is ignored; the bytes decide.
    loaded = load(data_url(source, "image/x-anything"))
    assert (loaded.width, loaded.height, loaded.image.mode) == (48, 20, "RGB")
    assert loaded.media_type == media_type
    red, green, _ = loaded.image.getpixel((10, 10))  # type: ignore[misc]
    assert red > 150 and green < 80


def test_transparent_png_becomes_rgb() -> None:
    loaded = load(data_url(encoded(Image.new("RGBA", (8, 8), (0, 255, 0, 0)), "PNG")))
    assert loaded.image.mode == "RGB"


def test_exif_orientation_is_applied() -> None:
    exif = Image.Exif()
    exif[0x0112] = 6  # stored landscape, shown rotated 90° clockwise
    source = encoded(Image.new("RGB", (40, 20), "white"), "JPEG", exif=exif)
    loaded = load(data_url(source, "image/jpeg"))
    assert (loaded.width, loaded.height) == (20, 40)


def test_animated_gif_gives_its_first_frame() -> None:
    frames = [Image.new("RGB", (16, 16), color) for color in ("red", "blue")]
    buffer = io.BytesIO()
    frames[0].save(buffer, "GIF", save_all=True, append_images=frames[1:], duration=100)
    loaded = load(data_url(buffer.getvalue(), "image/gif"))
    assert loaded.image.getpixel((5, 5)) == (255, 0, 0)


def test_decompression_bomb_is_refused_from_the_header() -> None:
    bomb = png_bomb(30_000, 30_000)
    assert len(bomb) < 600_000
    started = time.perf_counter()
    with pytest.raises(ImageRejected) as refused:
        load(data_url(bomb))
    assert time.perf_counter() - started < 1.0  # 900 megapixels would take far longer to decode
    assert "over the limit of 50,000,000 pixels" in str(refused.value)
    # Below Pillow's own refusal (twice its 89 Mpx limit), our check names the dimensions.
    with pytest.raises(ImageRejected, match=r"12000x10000 pixels \(120,000,000\), over the limit"):
        load(data_url(png_bomb(12_000, 10_000)))


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("data:image/png;base64,PGh0bWw+", "not a PNG, JPEG, WebP or GIF image"),
        ("data:image/png,rawbytes", "must be base64"),
        ("data:image/png;base64,***", "not valid base64"),
        ("data:image/png;base64,", "it is empty"),
    ],
)
def test_bad_data_urls_are_refused_with_the_reason(url: str, reason: str) -> None:
    with pytest.raises(ImageRejected) as refused:
        load(url)
    assert reason in str(refused.value)


def test_truncated_image_is_refused_as_damaged() -> None:
    source = encoded(Image.effect_noise((64, 64), 50).convert("RGB"), "PNG")
    with pytest.raises(ImageRejected, match="damaged"):
        load(data_url(source[: len(source) // 2]))


def test_data_over_the_byte_limit_is_refused_before_decoding(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MLX_SERVER_IMAGE_MAX_BYTES", "2048")
    from mlx_server.config import reset_settings

    reset_settings()
    with pytest.raises(ImageRejected, match="larger than the limit of 2,048 bytes"):
        load("data:image/png;base64," + "A" * 4000)
    with pytest.raises(ImageRejected, match="larger than the limit of 2,048 bytes"):
        decode_base64_image("A" * 4000)


def test_the_same_bytes_decode_once() -> None:
    source = encoded(Image.new("RGB", (30, 30), "purple"), "PNG")
    first = load(data_url(source))
    assert load(data_url(source)) is first
    assert get_image_cache().get(first.sha256) is first
    other = decode_base64_image(base64.b64encode(encoded(Image.new("RGB", (30, 30), "teal"), "PNG")).decode())
    assert other.sha256 != first.sha256


def test_a_cached_image_still_meets_a_stricter_pixel_limit() -> None:
    source = encoded(Image.new("RGB", (20, 20), "olive"), "PNG")
    decode_image(source, max_pixels=10_000)
    with pytest.raises(ImageRejected, match=r"20x20 pixels \(400\), over the limit of 100 pixels"):
        decode_image(source, max_pixels=100)


def test_cache_evicts_least_recently_used_within_its_pixel_budget() -> None:
    cache = DecodedImageCache(max_pixels=250)
    images = [
        decode_image(encoded(Image.new("RGB", (10, 10), (n, 0, 0)), "PNG"), max_pixels=10**6)
        for n in range(3)
    ]
    cache.put(images[0])
    cache.put(images[1])
    assert cache.get(images[0].sha256) is images[0]  # now the most recent
    cache.put(images[2])  # 300 pixels: the least recent (images[1]) goes
    assert cache.get(images[1].sha256) is None
    assert cache.get(images[0].sha256) is images[0] and cache.get(images[2].sha256) is images[2]
    assert len(cache) == 2


def test_fit_image_shrinks_to_the_limits_keeping_the_aspect_ratio() -> None:
    photo = Image.new("RGB", (2000, 1500))
    fitted = fit_image(photo, max_pixels=1_003_520, multiple_of=28)  # Qwen2.5-VL's default max
    assert fitted.width % 28 == 0 and fitted.height % 28 == 0
    assert 900_000 < fitted.width * fitted.height <= 1_003_520
    assert abs(fitted.width / fitted.height - 4 / 3) < 0.05
    assert fit_image(photo, max_side=512).size == (512, 384)
    small = Image.new("RGB", (280, 140))
    assert fit_image(small, max_pixels=1_000_000, multiple_of=28) is small
    assert fit_image(Image.new("RGB", (300, 150)), multiple_of=28).size == (308, 140)
    # Rounding to the nearest multiple never takes it over a limit it was within.
    assert fit_image(Image.new("RGB", (31, 31)), max_pixels=1000, multiple_of=2).size == (30, 30)
