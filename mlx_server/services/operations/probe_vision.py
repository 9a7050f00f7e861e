"""The vision step of the probe: images through the model's own processor and into the model.

Two small images in one prompt, built the way inference builds it (image parts through the
adapter and the chat template, the processor expanding each placeholder), then one generated
token: the images reached the model. A processor that refuses two images is asked for one.
"""

from __future__ import annotations

from PIL import Image

from mlx_server.errors import APIError
from mlx_server.models.loaders import LoadedModel
from mlx_server.services.pipeline.engine.generation import generate_text
from mlx_server.services.pipeline.engine.params import CompletionStats, GenerationParams, SamplingParams
from mlx_server.services.pipeline.engine.vision import vision_inputs

PROBE_IMAGE_SIDE = 56
QUESTION = "Describe the images."


def _prompt(loaded: LoadedModel, count: int) -> str:
    parts = [{"type": "image_url", "image_url": {"url": f"probe-image-{n}"}} for n in range(count)]
    messages = [{"role": "user", "content": [*parts, {"type": "text", "text": QUESTION}]}]
    adapter = loaded.chat
    return adapter.apply_chat_template(adapter.convert_messages(messages), enable_thinking=False)


async def check_images(loaded: LoadedModel) -> tuple[bool, str]:
    """(supports several images in one prompt, a detail for the step)."""
    colours = ((200, 30, 30), (30, 30, 200))
    images = [Image.new("RGB", (PROBE_IMAGE_SIDE, PROBE_IMAGE_SIDE), colour) for colour in colours]
    try:
        inputs = await vision_inputs(loaded, _prompt(loaded, 2), images)
        multi = True
    except APIError:
        inputs = await vision_inputs(loaded, _prompt(loaded, 1), images[:1])
        multi = False
    params = GenerationParams(max_tokens=1, sampling=SamplingParams(temperature=0.0))
    stats = CompletionStats()
    pieces = generate_text(loaded, inputs.input_ids, params, 1, stats, vision=inputs)
    try:
        async for _ in pieces:
            pass
    finally:
        await pieces.aclose()
    shown = "two images" if multi else "one image (the processor refused two)"
    return multi, (
        f"{shown} of {PROBE_IMAGE_SIDE}x{PROBE_IMAGE_SIDE} pixels: a prompt of {stats.prompt_tokens} tokens "
        f"with the image tokens, read in {stats.ttft_s or 0:.2f} s"
    )
