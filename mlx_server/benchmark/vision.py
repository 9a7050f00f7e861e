"""Time to first token with a 512x512 image against the same prompt without it (vision models).

In this process, through the chat pipeline every protocol uses (`generate_chat_completion`):
each run sends the question once with a fresh 512x512 PNG (random pixels, so the decoded-image
cache never answers) as a data: URL and once without it, and times the request from the call to
its first content token. Beside that, the parts of the image's cost: decoding the PNG
(`services/images.load_image`), the model's processor (resize, patches, image tokens), and the
model's own time to first token (prefill, the vision encoder included). No vision weights ship
with the project: pass a model directory.

    python -m mlx_server.benchmark.vision --model DIR [--runs 3] [--write docs/benchmarks.md]
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import io
import os
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from mlx_server.benchmark.report import publish, run_line

if TYPE_CHECKING:
    from mlx_server.services.pipeline.request import Message

SIDE = 512
QUESTION = "Describe this picture in one sentence."
MODEL_ID = "bench-vision"
MARKER_START = "<!-- vision-benchmark:start -->"
MARKER_END = "<!-- vision-benchmark:end -->"


@dataclass(frozen=True)
class Timing:
    request_ttft_s: float
    model_ttft_s: float
    prompt_tokens: int


def noise_png_url() -> str:
    from PIL import Image

    image = Image.frombytes("RGB", (SIDE, SIDE), os.urandom(SIDE * SIDE * 3))
    out = io.BytesIO()
    image.save(out, format="PNG")
    return "data:image/png;base64," + base64.b64encode(out.getvalue()).decode()


def _messages(image_url: str | None) -> tuple[Message, ...]:
    from mlx_server.services.pipeline.request import ImagePart, Message, TextPart

    content = QUESTION if image_url is None else (ImagePart(image_url), TextPart(QUESTION))
    return (Message("user", content),)


async def timed_request(image_url: str | None) -> Timing:
    from mlx_server.services.pipeline.engine.params import CompletionStats, GenerationParams, SamplingParams
    from mlx_server.services.pipeline.inference import generate_chat_completion
    from mlx_server.services.pipeline.request import GenerationRequest

    params = GenerationParams(max_tokens=2, sampling=SamplingParams(temperature=0.0))
    request = GenerationRequest(model=MODEL_ID, params=params, messages=_messages(image_url))
    stats = CompletionStats()
    started = time.perf_counter()
    reply = await (await generate_chat_completion(request, stats)).collect()
    assert reply is not None and stats.first_token_at is not None, "the generation produced no token"
    return Timing(stats.first_token_at - started, stats.ttft_s or 0.0, stats.prompt_tokens)


async def image_parts_s() -> tuple[float, float]:
    """(decode, processor) seconds for one fresh 512x512 PNG."""
    from mlx_server.models.pool import get_model_pool
    from mlx_server.services.images import load_image
    from mlx_server.services.pipeline.engine.vision import vision_inputs

    url = noise_png_url()
    started = time.perf_counter()
    image = (await load_image(url)).image
    decode_s = time.perf_counter() - started
    async with get_model_pool().lease(MODEL_ID) as loaded:
        adapter = loaded.chat
        text = adapter.apply_chat_template(adapter.convert_messages([m.as_openai() for m in _messages(url)]))
        started = time.perf_counter()
        await vision_inputs(loaded, text, [image])
        return decode_s, time.perf_counter() - started


async def measure(runs: int) -> tuple[list[Timing], list[Timing], list[tuple[float, float]]]:
    await timed_request(noise_png_url())  # loads the model, warms the kernels
    with_image: list[Timing] = []
    without: list[Timing] = []
    parts: list[tuple[float, float]] = []
    for i in range(runs):
        with_image.append(await timed_request(noise_png_url()))
        without.append(await timed_request(None))
        parts.append(await image_parts_s())
        shown, plain = with_image[-1].request_ttft_s, without[-1].request_ttft_s
        print(f"run {i + 1}: with image {shown:.3f} s, without {plain:.3f} s")
    return with_image, without, parts


def report(
    model_dir: Path, with_image: list[Timing], without: list[Timing], parts: list[tuple[float, float]]
) -> str:
    def median(values: list[float]) -> str:
        return f"{statistics.median(values):.3f} s"

    image_tokens = with_image[0].prompt_tokens - without[0].prompt_tokens
    decode_s, processor_s = median([p[0] for p in parts]), median([p[1] for p in parts])
    shown, plain = with_image[0], without[0]
    weights_mb = sum(f.stat().st_size for f in model_dir.glob("*.safetensors")) / 1e6
    return "\n".join(
        [
            run_line(),
            f"Model directory `{model_dir.name}` ({weights_mb:.0f} MB of weights); the question "
            f"{QUESTION!r}, greedy, {len(with_image)} "
            f"runs each (alternating), medians; a fresh {SIDE}x{SIDE} PNG of random pixels per run, "
            "sent as a data: URL.",
            "",
            "| request | prompt tokens | time to first token (request) | model's time to first token |",
            "|---|---|---|---|",
            f"| with the image | {shown.prompt_tokens} | {median([t.request_ttft_s for t in with_image])} "
            f"| {median([t.model_ttft_s for t in with_image])} |",
            f"| without it | {plain.prompt_tokens} | {median([t.request_ttft_s for t in without])} "
            f"| {median([t.model_ttft_s for t in without])} |",
            "",
            f"The image adds {image_tokens} prompt tokens. Of its cost: PNG decode {decode_s}, the model's "
            f"processor (resize, patches) {processor_s}; "
            "the rest is the vision encoder and the longer prefill (the model's time to first token).",
        ]
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--model", type=Path, required=True, help="a vision model directory (config.json with vision_config)"
    )
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--write", type=Path, help="update this markdown file's vision section")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="mlx-bench-vision-") as home:
        os.environ["MLX_MANAGER_HOME"] = home

        from mlx_server.database import background_session, upgrade_database
        from mlx_server.records import ModelRecord, ModelSource

        upgrade_database()
        with background_session() as session:
            session.add(ModelRecord(id=MODEL_ID, source=ModelSource.LOCAL, path=str(args.model.resolve())))
            session.commit()
        with_image, without, parts = asyncio.run(measure(args.runs))
    section = report(args.model, with_image, without, parts)
    publish(section, args.write, "Vision: time to first token with a 512x512 image", MARKER_START, MARKER_END)


if __name__ == "__main__":
    main()
