"""Image decode and resize time: what `services/images` costs a vision request before the
model's processor runs, for a 512x512 image and a 12-megapixel phone photo, PNG and JPEG.

For each image: `load_image` of its data: URL with the cache empty (base64, header checks,
decode, EXIF, RGB), the same call again (a later turn of the conversation: a cache hit), and
`fit_image` down to Qwen2.5-VL's default pixel budget in 28-pixel steps. Medians of --runs.

    python -m mlx_server.benchmark.images [--runs 5] [--write docs/benchmarks.md]
"""

from __future__ import annotations

import asyncio
import base64
import io
import statistics
import time
from collections.abc import Callable

from PIL import Image
from PIL import __version__ as pillow_version

from mlx_server.benchmark.report import bench_arguments, publish, run_line
from mlx_server.services.images import FetchPolicy, fit_image, get_image_cache, load_image

START, END = "<!-- images-benchmark:start -->", "<!-- images-benchmark:end -->"
QWEN_MAX_PIXELS = 1_003_520  # Qwen2.5-VL's processor default (1280 x 28 x 28)
SIZES = {"512x512": (512, 512), "4032x3024 (12 MP photo)": (4032, 3024)}


def photo_like(width: int, height: int) -> Image.Image:
    """Smooth colour gradients with sensor-like noise: compresses as photos do (pure noise would not)."""
    noise = Image.effect_noise((width, height), 12)
    red = Image.linear_gradient("L").resize((width, height))
    blue = Image.radial_gradient("L").resize((width, height))
    return Image.merge("RGB", (Image.blend(red, noise, 0.3), noise, Image.blend(blue, noise, 0.3)))


def encoded(image: Image.Image, fmt: str) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, fmt, **({"quality": 90} if fmt == "JPEG" else {}))
    return buffer.getvalue()


def median_seconds(
    action: Callable[[], object], runs: int, before: Callable[[], None] = lambda: None
) -> float:
    times = []
    for _ in range(runs):
        before()
        started = time.perf_counter()
        action()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def measure(name: str, image: Image.Image, fmt: str, runs: int) -> str:
    data = encoded(image, fmt)
    url = f"data:image/{fmt.lower()};base64,{base64.b64encode(data).decode()}"
    policy = FetchPolicy()
    cache = get_image_cache()

    def load() -> Image.Image:
        return asyncio.run(load_image(url, policy=policy)).image

    cold = median_seconds(load, runs, before=cache.clear)
    warm = median_seconds(load, runs)
    decoded = load()
    fitted = fit_image(decoded, max_pixels=QWEN_MAX_PIXELS, multiple_of=28)
    resize = median_seconds(lambda: fit_image(decoded, max_pixels=QWEN_MAX_PIXELS, multiple_of=28), runs)
    size = f"{len(data) / 1e6:.2f} MB"
    fit = f"{fitted.width}x{fitted.height}, {resize * 1000:.1f} ms"
    return f"| {name} | {fmt} | {size} | {cold * 1000:.1f} ms | {warm * 1000:.2f} ms | {fit} |"


def main() -> None:
    args = bench_arguments(__doc__, "Write the results into this Markdown file.", runs=5)
    rows = [
        measure(name, photo_like(*size), fmt, args.runs)
        for name, size in SIZES.items()
        for fmt in ("PNG", "JPEG")
    ]
    section = "\n".join(
        [
            run_line(),
            f"Pillow {pillow_version}; medians of {args.runs} runs; images are gradients with noise "
            "(they compress as photos do), sent as data: URLs.",
            "",
            "| image | format | bytes | decode (cache empty) | again (cache hit) | fit to Qwen2.5-VL's 1 MP "
            "|",
            "|---|---|---|---|---|---|",
            *rows,
        ]
    )
    publish(section, args.write, "Images: decode and resize", START, END)


if __name__ == "__main__":
    main()
