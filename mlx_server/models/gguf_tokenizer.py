"""Rebuild a Hugging Face fast tokenizer from GGUF tokenizer metadata.

GGUF files carry the vocabulary, merges and special-token ids that llama.cpp
needs; the `tokenizers` library turns them back into a `tokenizer.json` that
`transformers.AutoTokenizer` (and so `mlx_lm.load`) reads.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors

# llama.cpp token types (gguf TokenType): 3 = control, 4 = user defined, 6 = byte.
_CONTROL = 3
_USER_DEFINED = 4

# Pre-tokenizer regex of Llama 3 style BPE vocabularies (tokenizer.ggml.pre "llama-bpe").
_LLAMA3_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
# Qwen2's (also Qwen2.5's and Qwen3's): Llama 3's with single digits.
_QWEN2_SPLIT = _LLAMA3_SPLIT.replace(r"\p{N}{1,3}", r"\p{N}")
_QWEN2_PRE = ("qwen2", "deepseek-r1-qwen")


class TokenizerImportError(ValueError):
    """The GGUF tokenizer metadata describes a tokenizer we cannot rebuild."""


def _byte_level_pre_tokenizer(pre: str) -> pre_tokenizers.PreTokenizer:
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    if pre == "smollm":
        # SmolLM splits every digit on its own before the GPT-2 byte-level regex.
        return pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True), byte_level])
    split = _LLAMA3_SPLIT if pre in ("llama-bpe", "llama3", "smaug-bpe") else None
    split = _QWEN2_SPLIT if pre in _QWEN2_PRE else split
    if split is not None:
        return pre_tokenizers.Sequence(
            [
                pre_tokenizers.Split(Regex(split), behavior="isolated"),
                pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
            ]
        )
    if pre in ("default", "gpt-2", "gpt2"):
        return byte_level
    raise TokenizerImportError(
        f"unsupported BPE pre-tokenizer {pre!r} (tokenizer.ggml.pre); "
        "supported: smollm, llama-bpe, qwen2, gpt-2, default"
    )


def _build_bpe(meta: dict[str, Any], tokens: list[str]) -> Tokenizer:
    merges_raw = meta.get("tokenizer.ggml.merges")
    if not merges_raw:
        raise TokenizerImportError("BPE tokenizer without tokenizer.ggml.merges")
    merges = [tuple(m.split(" ", 1)) for m in merges_raw]
    vocab = {tok: i for i, tok in enumerate(tokens)}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    pre = str(meta.get("tokenizer.ggml.pre", "default"))
    tok.pre_tokenizer = _byte_level_pre_tokenizer(pre)
    if pre in _QWEN2_PRE:
        tok.normalizer = normalizers.NFC()  # as Qwen2's own tokenizer.json (llama.cpp skips it)
    tok.decoder = decoders.ByteLevel()
    return tok


def _spm_merges(tokens: list[str], scores: list[float]) -> list[tuple[str, str]]:
    """Derive BPE merges from a SentencePiece vocabulary: every token that splits
    into two vocabulary tokens yields a merge, ranked by the merged token's score."""
    vocab = {tok: i for i, tok in enumerate(tokens)}
    ranked: list[tuple[float, int, int, str, str]] = []
    for merged, merged_id in vocab.items():
        for cut in range(1, len(merged)):
            left, right = merged[:cut], merged[cut:]
            if left in vocab and right in vocab:
                ranked.append((-scores[merged_id], vocab[left], vocab[right], left, right))
    ranked.sort()
    return [(left, right) for *_, left, right in ranked]


def _build_spm(meta: dict[str, Any], tokens: list[str]) -> Tokenizer:
    scores = meta.get("tokenizer.ggml.scores")
    if scores is None:
        raise TokenizerImportError("SentencePiece tokenizer without tokenizer.ggml.scores")
    score_list = [float(s) for s in _as_list(scores)]
    if str(meta.get("general.architecture", "")).startswith("gemma"):
        # Gemma files spell their runs of spaces as spaces (the vocabulary uses "▁"), and their
        # scores do not follow the merge order: the order of the vocabulary does.
        tokens = ["▁" * len(t) if len(t) > 1 and not t.strip(" ") else t for t in tokens]
        score_list = [-float(i) for i in range(len(tokens))]
    unk_id = int(_scalar(meta.get("tokenizer.ggml.unknown_token_id", 0)))
    vocab = {tok: i for i, tok in enumerate(tokens)}
    tok = Tokenizer(
        models.BPE(
            vocab=vocab,
            merges=_spm_merges(tokens, score_list),
            unk_token=tokens[unk_id],
            fuse_unk=True,
            byte_fallback=True,
        )
    )
    prefix = [normalizers.Prepend("▁")] if _flag(meta, "tokenizer.ggml.add_space_prefix", True) else []
    tok.normalizer = normalizers.Sequence([*prefix, normalizers.Replace(" ", "▁")])
    tok.decoder = decoders.Sequence(
        [
            decoders.Replace("▁", " "),
            decoders.ByteFallback(),
            decoders.Fuse(),
            *([decoders.Strip(" ", 1, 0)] if prefix else []),
        ]
    )
    return tok


def _as_list(value: Any) -> list[Any]:
    return value.tolist() if hasattr(value, "tolist") else list(value)


def _scalar(value: Any) -> Any:
    return value.item() if hasattr(value, "item") else value


def _flag(meta: dict[str, Any], key: str, default: bool) -> bool:
    value = meta.get(key)
    return default if value is None else bool(_scalar(value))


def _token_id(tokens: list[str], meta: dict[str, Any], key: str) -> int | None:
    value = meta.get(key)
    if value is None:
        return None
    index = int(_scalar(value))
    return index if 0 <= index < len(tokens) else None


def _token_at(tokens: list[str], meta: dict[str, Any], key: str) -> str | None:
    index = _token_id(tokens, meta, key)
    return None if index is None else tokens[index]


def _add_marked_tokens(tok: Tokenizer, meta: dict[str, Any], tokens: list[str]) -> None:
    """Control tokens as special added tokens, user-defined ones as plain added tokens."""
    types = _as_list(meta.get("tokenizer.ggml.token_type", [1] * len(tokens)))
    if len(types) != len(tokens):
        raise TokenizerImportError(f"{len(tokens)} tokens but {len(types)} token types in the GGUF metadata")
    marked = list(zip(tokens, types, strict=True))
    specials = [AddedToken(t, special=True, normalized=False) for t, k in marked if k == _CONTROL]
    user = [AddedToken(t, special=False, normalized=False) for t, k in marked if k == _USER_DEFINED]
    tok.add_special_tokens(specials)
    tok.add_tokens(user)


def write_tokenizer(meta: dict[str, Any], out_dir: Path, *, max_length: int) -> dict[str, Any]:
    """Write tokenizer.json and tokenizer_config.json; return the special-token ids."""
    tokens = meta.get("tokenizer.ggml.tokens")
    if not tokens:
        raise TokenizerImportError("the GGUF file has no tokenizer (tokenizer.ggml.tokens)")
    tokens = [str(t) for t in tokens]
    kind = str(meta.get("tokenizer.ggml.model", ""))
    if kind == "gpt2":
        tok = _build_bpe(meta, tokens)
    elif kind == "llama":
        tok = _build_spm(meta, tokens)
    else:
        raise TokenizerImportError(
            f"unsupported tokenizer model {kind!r} (tokenizer.ggml.model); supported: gpt2, llama"
        )

    _add_marked_tokens(tok, meta, tokens)
    bos = _token_at(tokens, meta, "tokenizer.ggml.bos_token_id")
    eos = _token_at(tokens, meta, "tokenizer.ggml.eos_token_id")
    add_bos = _flag(meta, "tokenizer.ggml.add_bos_token", kind == "llama")
    if add_bos and bos is not None:
        tok.post_processor = processors.TemplateProcessing(
            single=f"{bos} $A",
            pair=f"{bos} $A {bos} $B",
            special_tokens=[(bos, int(_scalar(meta["tokenizer.ggml.bos_token_id"])))],
        )
    elif kind == "gpt2":
        tok.post_processor = processors.ByteLevel(trim_offsets=False)
    tok.save(str(out_dir / "tokenizer.json"))

    config: dict[str, Any] = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "model_max_length": max_length,
        "clean_up_tokenization_spaces": False,
        "add_bos_token": add_bos,
        "bos_token": bos,
        "eos_token": eos,
        "unk_token": _token_at(tokens, meta, "tokenizer.ggml.unknown_token_id"),
        "pad_token": _token_at(tokens, meta, "tokenizer.ggml.padding_token_id"),
    }
    if template := meta.get("tokenizer.chat_template"):
        config["chat_template"] = str(template)
    (out_dir / "tokenizer_config.json").write_text(json.dumps(config, indent=2, ensure_ascii=False))
    return {
        "bos_token_id": _token_id(tokens, meta, "tokenizer.ggml.bos_token_id"),
        "eos_token_id": _token_id(tokens, meta, "tokenizer.ggml.eos_token_id"),
    }
