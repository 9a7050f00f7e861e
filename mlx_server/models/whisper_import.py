"""Convert a CTranslate2 Whisper model (faster-whisper's format) into the directory mlx-audio's
Whisper loads: config.json (MLX dimensions), model.safetensors, the Hugging Face tokenizer and
feature-extractor files, generation_config.json (alignment heads for word timestamps).

CTranslate2's model.bin (binary version 6, ctranslate2/specs/model_spec.py) is: u32 version,
string spec name, u32 revision, u32 variable count, then per variable a string name, u8 rank,
u32 dims, u8 dtype id, u32 byte count and the raw little-endian data; then u32 alias count and
(alias, target) string pairs. Strings are a u16 length (with the NUL) and the bytes. We read it
with numpy only (no ctranslate2 install) and copy every weight unchanged: CTranslate2 fuses
q/k/v (self-attention) and k/v (cross-attention) row-wise and stores Whisper's bias-free key
with a zero bias, which we check and drop; convolutions are transposed to MLX's (out, k, in).
The values themselves are not touched, so the conversion is exact (float16 in, float16 out).
"""

from __future__ import annotations

import json
import re
import shutil
import struct
import tempfile
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from mlx_server.models.gguf_import import ConvertedModel

# CTranslate2's DataType enum (include/ctranslate2/types.h).
_CT2_DTYPES = {0: np.float32, 1: np.int8, 2: np.int16, 3: np.int32, 4: np.float16}
_LAYER = re.compile(r"(encoder|decoder)/layer_(\d+)/(\w+)/(layer_norm|linear_\d)/(\w+)$")
_NORM = {"gamma": "weight", "beta": "bias"}
# (component, linear index) -> MLX module names; several names: the rows are split evenly.
_LINEARS = {
    ("self_attention", "linear_0"): ("attn.query", "attn.key", "attn.value"),
    ("self_attention", "linear_1"): ("attn.out",),
    ("attention", "linear_0"): ("cross_attn.query",),
    ("attention", "linear_1"): ("cross_attn.key", "cross_attn.value"),
    ("attention", "linear_2"): ("cross_attn.out",),
    ("ffn", "linear_0"): ("mlp1",),
    ("ffn", "linear_1"): ("mlp2",),
}
_LAYER_NORMS = {"self_attention": "attn_ln", "attention": "cross_attn_ln", "ffn": "mlp_ln"}
_TOP_LEVEL = {
    "encoder/layer_norm": "encoder.ln_post",
    "decoder/layer_norm": "decoder.ln",
    "encoder/conv1": "encoder.conv1",
    "encoder/conv2": "encoder.conv2",
    "decoder/embeddings": "decoder.token_embedding",
}
# Whisper's feature extractor (80 mel bins, 16 kHz, 30 s windows), as openai/whisper-tiny.en ships it.
_PREPROCESSOR = {
    "feature_extractor_type": "WhisperFeatureExtractor",
    "processor_class": "WhisperProcessor",
    "feature_size": 80,
    "sampling_rate": 16000,
    "hop_length": 160,
    "chunk_length": 30,
    "n_fft": 400,
    "n_samples": 480000,
    "nb_max_frames": 3000,
    "padding_side": "right",
    "padding_value": 0.0,
    "return_attention_mask": False,
}
TIMESTAMP_TOKENS = 1501  # <|0.00|> ... <|30.00|>, one per 20 ms


class WhisperImportError(ValueError):
    """The directory is not a CTranslate2 Whisper model we can convert; the message says why."""


def _string(f: BinaryIO) -> str:
    (length,) = struct.unpack("<H", f.read(2))
    return f.read(length)[:-1].decode()


def read_ctranslate2(model_bin: Path) -> tuple[str, dict[str, np.ndarray]]:
    """The spec name and the named variables of a CTranslate2 model.bin (aliases resolved)."""
    variables: dict[str, np.ndarray] = {}
    with model_bin.open("rb") as f:
        try:
            (version,) = struct.unpack("<I", f.read(4))
            if version < 5:
                raise WhisperImportError(f"{model_bin}: CTranslate2 binary version {version} is too old")
            spec = _string(f)
            struct.unpack("<I", f.read(4))  # the spec's revision
            (count,) = struct.unpack("<I", f.read(4))
            for _ in range(count):
                name = _string(f)
                rank = f.read(1)[0]
                shape = struct.unpack(f"<{rank}I", f.read(4 * rank))
                dtype_id = f.read(1)[0]
                (size,) = struct.unpack("<I", f.read(4))
                if dtype_id not in _CT2_DTYPES:
                    raise WhisperImportError(
                        f"{model_bin}: {name} has dtype id {dtype_id}; quantized models are not supported"
                    )
                variables[name] = np.frombuffer(f.read(size), dtype=_CT2_DTYPES[dtype_id]).reshape(shape)
            (aliases,) = struct.unpack("<I", f.read(4))
            for _ in range(aliases):
                alias, target = _string(f), _string(f)
                variables[alias] = variables[target]
        except (struct.error, IndexError, ValueError, KeyError) as exc:
            if isinstance(exc, WhisperImportError):
                raise
            raise WhisperImportError(f"{model_bin} is not a readable CTranslate2 model ({exc})") from exc
    return spec, variables


def _split(prefix: str, modules: tuple[str, ...], part: str, value: np.ndarray) -> dict[str, np.ndarray]:
    out: dict[str, np.ndarray] = {}
    for module, rows in zip(modules, np.split(value, len(modules)), strict=True):
        if module.endswith(".key") and part == "bias":
            if np.any(rows):
                raise WhisperImportError(f"{prefix}.{module} has a non-zero bias; Whisper's key has none")
            continue
        out[f"{prefix}.{module}.{part}"] = rows
    return out


def mlx_weights(variables: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """CTranslate2 WhisperSpec variables -> mlx-audio Whisper parameter names."""
    out: dict[str, np.ndarray] = {}
    for name, value in variables.items():
        if match := _LAYER.fullmatch(name):
            side, layer, component, kind, part = match.groups()
            prefix = f"{side}.blocks.{layer}"
            if kind == "layer_norm":
                out[f"{prefix}.{_LAYER_NORMS[component]}.{_NORM[part]}"] = value
            else:
                out.update(_split(prefix, _LINEARS[(component, kind)], part, value))
        elif name == "decoder/position_encodings/encodings":
            out["decoder.positional_embedding"] = value
        elif (module := name.rsplit("/", 1)[0]) in _TOP_LEVEL:
            part = name.rsplit("/", 1)[1]
            value = (
                value.transpose(0, 2, 1) if module.startswith("encoder/conv") and part == "weight" else value
            )
            out[f"{_TOP_LEVEL[module]}.{_NORM.get(part, part)}"] = value
        # Left out: flags and head counts (they are in config.json), the encoder's sinusoidal
        # positions (mlx-audio computes them) and the projection (tied to the embeddings).
    return out


def _dimensions(variables: dict[str, np.ndarray]) -> dict[str, Any]:
    def layers(side: str) -> int:
        return len({m.group(2) for n in variables if (m := _LAYER.fullmatch(n)) and m.group(1) == side})

    vocab, state = variables["decoder/embeddings/weight"].shape
    return {
        "model_type": "whisper",
        "n_mels": int(variables["encoder/conv1/weight"].shape[1]),
        "n_audio_ctx": int(variables["encoder/position_encodings/encodings"].shape[0]),
        "n_audio_state": int(variables["encoder/conv1/weight"].shape[0]),
        "n_audio_head": int(variables["encoder/num_heads"]),
        "n_audio_layer": layers("encoder"),
        "n_vocab": int(vocab),
        "n_text_ctx": int(variables["decoder/position_encodings/encodings"].shape[0]),
        "n_text_state": int(state),
        "n_text_head": int(variables["decoder/num_heads"]),
        "n_text_layer": layers("decoder"),
    }


def _write_tokenizer(source: Path, target: Path, n_vocab: int) -> None:
    """tokenizer.json with the timestamp tokens CTranslate2's copy leaves out (mlx-audio finds
    them by name: <|0.00|> is the first), and the configs transformers' WhisperProcessor reads."""
    tokenizer = json.loads((source / "tokenizer.json").read_text())
    known = {t["content"] for t in tokenizer["added_tokens"]}
    first = n_vocab - TIMESTAMP_TOKENS
    for i in range(TIMESTAMP_TOKENS):
        content = f"<|{i * 0.02:.2f}|>"
        if content not in known:
            tokenizer["added_tokens"].append(
                {"id": first + i, "content": content, "single_word": False, "lstrip": False,
                 "rstrip": False, "normalized": False, "special": False}
            )  # fmt: skip
    (target / "tokenizer.json").write_text(json.dumps(tokenizer, ensure_ascii=False))
    endoftext = "<|endoftext|>"
    tokenizer_config = {
        "tokenizer_class": "WhisperTokenizer",
        "bos_token": endoftext,
        "eos_token": endoftext,
        "unk_token": endoftext,
        "pad_token": endoftext,
        "model_max_length": 1024,
        "processor_class": "WhisperProcessor",
    }
    (target / "tokenizer_config.json").write_text(json.dumps(tokenizer_config, indent=2))
    (target / "preprocessor_config.json").write_text(json.dumps(_PREPROCESSOR, indent=2))


def convert_ctranslate2_whisper(source: Path, out_dir: Path) -> ConvertedModel:
    """Convert the CTranslate2 Whisper directory `source` into a new directory `out_dir`."""
    if out_dir.exists():
        raise WhisperImportError(f"{out_dir} already exists; choose another model id")
    if not (source / "model.bin").is_file() or not (source / "tokenizer.json").is_file():
        raise WhisperImportError(
            f"{source} lacks model.bin or tokenizer.json: not a CTranslate2 Whisper model"
        )
    spec, variables = read_ctranslate2(source / "model.bin")
    if spec != "WhisperSpec":
        raise WhisperImportError(f"{source} holds a CTranslate2 {spec}, not a Whisper model")
    config = _dimensions(variables)
    ct2_config = (
        json.loads((source / "config.json").read_text()) if (source / "config.json").is_file() else {}
    )

    from safetensors.numpy import save_file

    out_dir.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.", dir=out_dir.parent))
    try:
        weights = {k: np.ascontiguousarray(v) for k, v in mlx_weights(variables).items()}
        save_file(weights, str(staging / "model.safetensors"), metadata={"format": "mlx"})
        (staging / "config.json").write_text(json.dumps(config, indent=2))
        generation = {
            "alignment_heads": ct2_config.get("alignment_heads", []),
            "is_multilingual": config["n_vocab"] >= 51865,
        }
        (staging / "generation_config.json").write_text(json.dumps(generation, indent=2))
        _write_tokenizer(source, staging, config["n_vocab"])
        staging.rename(out_dir)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    size = sum(f.stat().st_size for f in out_dir.iterdir() if f.is_file())
    return ConvertedModel(
        path=out_dir, architecture="whisper", name=None, quantization_bits=None, size_bytes=size
    )
