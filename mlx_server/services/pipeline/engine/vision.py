"""Images in the chat pipeline (blueprint §4.2): a vision model's prompt with its pixels.

The chat template writes one image placeholder per image part; mlx-vlm's `prepare_inputs`
runs the model's own processor on the prompt and the images (resizing, patching, and expanding
each placeholder to the image's tokens), and mlx-vlm's `generate_step` embeds the images into
the prompt before the same token loop as text. The images themselves come from
`services/images.load_image` (safe fetching, decoding, the content-hash cache).
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from typing import Any

import mlx.core as mx
from PIL import Image

from mlx_server.errors import APIError
from mlx_server.models.detection import ModelType
from mlx_server.models.loaders import LoadedModel
from mlx_server.services.images import ImageRejected, load_image
from mlx_server.services.pipeline.request import ImagePart
from mlx_server.utils.metal import run_on_metal_thread


@dataclass(frozen=True)
class VisionInputs:
    """What mlx-vlm's generate_step takes beside the sampler: the prompt's token ids (image
    tokens included), the processed pixels and the processor's other outputs (image grid...)."""

    input_ids: list[int]
    pixel_values: Any = None
    mask: Any = None
    extra: dict[str, Any] = field(default_factory=dict)


async def request_images(loaded: LoadedModel, parts: tuple[ImagePart, ...]) -> list[Image.Image]:
    """A request's images, decoded; a 400 when the model cannot read images or an image is
    refused (the reason named)."""
    if not parts:
        return []
    if loaded.model_type is not ModelType.VISION:
        raise APIError(
            400,
            f"Model {loaded.model_id!r} cannot read images: it is a {loaded.model_type} model without "
            "the vision capability. Send text only, or choose a vision model.",
            param="messages",
            code="model_not_vision",
        )
    images: list[Image.Image] = []
    for number, part in enumerate(parts, start=1):
        try:
            images.append((await load_image(part.url)).image)
        except ImageRejected as exc:
            raise APIError(
                400, f"Image {number} was refused: {exc}", param="messages", code="image_rejected"
            ) from exc
    return images


async def vision_inputs(loaded: LoadedModel, prompt_text: str, images: list[Image.Image]) -> VisionInputs:
    """The model's processor run on the prompt and the images, on the MLX thread."""
    return await run_on_metal_thread(lambda: _prepare(loaded, prompt_text, images))


def _prepare(loaded: LoadedModel, prompt_text: str, images: list[Image.Image]) -> VisionInputs:
    from mlx_vlm.utils import prepare_inputs, should_add_special_tokens

    config = loaded.model.config
    try:
        inputs = prepare_inputs(  # type: ignore[no-untyped-call]  # mlx-vlm leaves it untyped
            loaded.processor,
            images=images or None,
            prompts=[prompt_text],
            image_token_index=getattr(config, "image_token_index", None),
            add_special_tokens=should_add_special_tokens(config.model_type, loaded.processor),
        )
    except ValueError as exc:  # e.g. more images than the template wrote placeholders for
        raise APIError(400, f"The model's processor refused the images: {exc}", param="messages") from exc
    ids: list[int] = inputs["input_ids"][0].tolist()
    extra = {k: v for k, v in inputs.items() if k not in ("input_ids", "pixel_values", "attention_mask")}
    return VisionInputs(ids, inputs.get("pixel_values"), inputs.get("attention_mask"), extra)


def vision_token_steps(
    loaded: LoadedModel,
    inputs: VisionInputs,
    *,
    max_tokens: int,
    sampler: Callable[[mx.array], mx.array],
    logits_processors: list[Any],
) -> Generator[tuple[int, mx.array], None, None]:
    """mlx-vlm's token loop on the MLX thread: (token, logprobs) pairs, like mlx-lm's. A fresh
    KV cache each time: the prompt cache is keyed by tokens, and image tokens are the same ids
    whatever the picture."""
    from mlx_vlm.generate.ar import generate_step

    # Annotated as yielding arrays; it yields the token as an int (`y.item()`), as mlx-lm's does.
    steps: Generator[tuple[int, mx.array], None, None] = generate_step(  # type: ignore[assignment]
        mx.array([inputs.input_ids]),
        loaded.model,
        inputs.pixel_values,
        inputs.mask,
        max_tokens=max_tokens,
        sampler=sampler,
        logits_processors=logits_processors,
        **inputs.extra,
    )
    return steps


def text_inputs(prompt: list[int]) -> VisionInputs:
    """A prompt without images for a vision model (a legacy completion, a probe)."""
    return VisionInputs(list(prompt))
