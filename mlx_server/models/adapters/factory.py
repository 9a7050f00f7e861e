"""Adapter factory (blueprint §6.3): family class + parsers named in the database."""

from __future__ import annotations

from typing import Any

from mlx_server.models.adapters.base import ModelAdapter
from mlx_server.models.adapters.families import (
    DefaultAdapter,
    FamilyAdapter,
    GemmaAdapter,
    GLM4Adapter,
    LlamaAdapter,
    MistralAdapter,
    QwenAdapter,
)
from mlx_server.parsers.registry import resolve_thinking_parser, resolve_tool_parser
from mlx_server.records import ModelCapabilities

FAMILY_REGISTRY: dict[str, type[FamilyAdapter]] = {
    cls.family_name: cls
    for cls in (QwenAdapter, GLM4Adapter, LlamaAdapter, GemmaAdapter, MistralAdapter, DefaultAdapter)
}


def create_adapter(
    family: str,
    tokenizer: Any,
    capabilities: ModelCapabilities | None = None,
    *,
    images: bool = False,
) -> ModelAdapter:
    """One adapter for a model being loaded; parsers from a probe override the family defaults.
    `images`: a vision model, whose chat template is given image parts."""
    adapter_class = FAMILY_REGISTRY.get(family, DefaultAdapter)
    tool_parser = None
    thinking_parser = None
    if capabilities is not None and capabilities.tool_parser_id:
        tool_parser = resolve_tool_parser(capabilities.tool_parser_id)
    if capabilities is not None and capabilities.thinking_parser_id:
        thinking_parser = resolve_thinking_parser(capabilities.thinking_parser_id)
    adapter = adapter_class(
        tokenizer, tool_parser=tool_parser, thinking_parser=thinking_parser, capabilities=capabilities
    )
    adapter.accepts_images = images
    return adapter
