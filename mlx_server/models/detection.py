"""Classify a model directory: which loader (type) and which adapter (family), blueprint §10.1.

The probe stores both in ModelCapabilities; these functions are the fallback for models that
were never probed, and the probe's first step.
"""

from __future__ import annotations

import json
from enum import StrEnum
from pathlib import Path
from typing import Any


class ModelType(StrEnum):
    TEXT_GEN = "text-gen"
    VISION = "vision"
    EMBEDDINGS = "embeddings"
    # Audio models are two types: they load and serve differently (speech in, text out; text in,
    # speech out), so each has its endpoint and the wrong one is refused by name.
    SPEECH_TO_TEXT = "stt"
    TEXT_TO_SPEECH = "tts"
    # Cross-encoders: a query and a document in, a relevance score out (POST /v1/rerank).
    RERANK = "rerank"


_EMBEDDING_ARCHITECTURES = ("BertModel", "XLMRobertaModel", "NomicBertModel", "ModernBertModel")
# Sequence-classification architectures of rerankers (models/cross_encoder.py) -> the encoder
# attribute, which is also their weights' prefix.
CROSS_ENCODER_ARCHITECTURES = {
    "BertForSequenceClassification": "bert",
    "XLMRobertaForSequenceClassification": "roberta",
    "RobertaForSequenceClassification": "roberta",
}


def cross_encoder_architecture(config: dict[str, Any]) -> str | None:
    """The config's reranker architecture we can load, if it names one."""
    return next((a for a in config.get("architectures") or [] if a in CROSS_ENCODER_ARCHITECTURES), None)


# config.json model_type values of mlx-audio's STT and TTS models (mlx_audio/stt/models,
# mlx_audio/tts/models); names it shares with text models (llama, qwen3) are left out.
_STT_MODEL_TYPES = (
    "whisper",
    "parakeet",
    "parakeet_tdt",
    "moonshine",
    "wav2vec2",
    "mms",
    "voxtral",
    "canary",
    "sensevoice",
    "qwen3_asr",
    "granite_speech",
    "fireredasr2",
    "cohere_asr",
)
_TTS_MODEL_TYPES = (
    "kokoro",
    "sesame",
    "csm",
    "outetts",
    "spark",
    "bark",
    "dia",
    "kitten_tts",
    "melotts",
    "chatterbox",
    "pocket_tts",
    "qwen3_tts",
    "voxcpm",
    "soprano",
)


def read_config(model_path: Path) -> dict[str, Any]:
    """The model's config.json, or {} when it has none."""
    try:
        config = json.loads((model_path / "config.json").read_text())
    except (OSError, ValueError):
        return {}
    return config if isinstance(config, dict) else {}


def read_chat_template(model_path: Path) -> str:
    """The template the model's loader uses: a vision processor's chat_template.json first (as
    mlx-vlm reads it), then tokenizer_config.json, then chat_template.jinja."""
    try:
        processor_template = json.loads((model_path / "chat_template.json").read_text()).get("chat_template")
    except (OSError, ValueError, AttributeError):
        processor_template = None
    if isinstance(processor_template, str):
        return processor_template
    try:
        tokenizer_config = json.loads((model_path / "tokenizer_config.json").read_text())
    except (OSError, ValueError):
        tokenizer_config = {}
    template = tokenizer_config.get("chat_template") if isinstance(tokenizer_config, dict) else None
    if isinstance(template, str):
        return template
    jinja = model_path / "chat_template.jinja"
    return jinja.read_text() if jinja.is_file() else ""


def has_image_processor(model_path: Path) -> bool:
    """Whether the directory carries an image processor config (preprocessor_config.json or
    processor_config.json naming an image processor or image normalization), as vision models do."""
    for name in ("preprocessor_config.json", "processor_config.json"):
        try:
            data = json.loads((model_path / name).read_text())
        except (OSError, ValueError):
            continue
        if isinstance(data, dict) and isinstance(data.get("image_processor"), dict):
            data = data["image_processor"]
        if isinstance(data, dict) and ("image_processor_type" in data or "image_mean" in data):
            return True
    return False


def detect_model_type(model_path: Path, config: dict[str, Any] | None = None) -> ModelType:
    config = read_config(model_path) if config is None else config
    model_type = str(config.get("model_type", "")).lower()
    architectures = [str(a) for a in config.get("architectures") or []]
    if model_type in _STT_MODEL_TYPES or any("Whisper" in a or "ForCTC" in a for a in architectures):
        return ModelType.SPEECH_TO_TEXT
    if model_type in _TTS_MODEL_TYPES:
        return ModelType.TEXT_TO_SPEECH
    if "vision_config" in config or any("VisionText" in a or "VL" in a for a in architectures):
        return ModelType.VISION
    if has_image_processor(model_path):
        return ModelType.VISION
    if cross_encoder_architecture(config) is not None:
        return ModelType.RERANK
    if (model_path / "modules.json").is_file() or any(a in _EMBEDDING_ARCHITECTURES for a in architectures):
        return ModelType.EMBEDDINGS
    return ModelType.TEXT_GEN


def detect_model_family(model_id: str, config: dict[str, Any] | None = None, chat_template: str = "") -> str:
    """The adapter family: qwen, glm4, llama, gemma, mistral or default.

    The chat template decides first, because it is what the adapter must speak: many models
    reuse the llama architecture with another template (SmolLM2 uses ChatML).
    """
    name = model_id.lower()
    model_type = str((config or {}).get("model_type", "")).lower()
    if "[gMASK]" in chat_template or "glm" in model_type or "glm" in name:
        return "glm4"
    if "<start_of_turn>" in chat_template or model_type.startswith("gemma"):
        return "gemma"
    if "<|start_header_id|>" in chat_template:
        return "llama"
    if "[INST]" in chat_template or model_type in ("mistral", "mixtral", "ministral", "mistral3"):
        return "mistral"
    if model_type.startswith("qwen") or "qwen" in name:
        return "qwen"
    if not chat_template and model_type == "llama" and "llama" in name:
        return "llama"
    return "default"
