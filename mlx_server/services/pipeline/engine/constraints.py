"""Constrained decoding: an llguidance grammar as an mlx-lm logits processor.

Before each token the request's matcher computes which tokens keep the output inside the
grammar; every other token's logit becomes -inf, so the sampler can only pick valid ones.
The tokenizer-to-grammar setup (`LLTokenizer`, ~0.3 s) is built once per loaded model and
cached on its adapter; a request only builds its matcher (about a millisecond). Mask
computation runs on the MLX thread, inside the token loop, in well under a millisecond here.
"""

from __future__ import annotations

import asyncio
import json
import re
from typing import Any

import mlx.core as mx
import numpy as np
from llguidance import LLMatcher, LLParserLimits, LLTokenizer

from mlx_server.errors import APIError

# A schema larger than this is refused before compiling (400), whatever the engine could do.
MAX_SCHEMA_BYTES = 64 * 1024
# Building a matcher for a pathological grammar must not hang a request.
COMPILE_TIMEOUT_SECONDS = 5.0
# Compact JSON: the same values in fewer tokens than pretty-printed output.
JSON_OPTIONS: Any = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "}


def json_schema_grammar(schema: dict[str, Any], param: str) -> str:
    text = json.dumps(schema)
    if len(text) > MAX_SCHEMA_BYTES:
        raise APIError(
            400,
            f"The schema is {len(text)} bytes; at most {MAX_SCHEMA_BYTES} are accepted.",
            param=param,
            code="schema_too_large",
        )
    return str(LLMatcher.grammar_from_json_schema(text, overrides=JSON_OPTIONS))


def lark_grammar(lark: str) -> str:
    return str(LLMatcher.grammar_from_lark(lark))


_LARK_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')


def specialize(grammar_lark: str, special_tokens: dict[str, int]) -> str:
    """Quoted literals holding an added token's text, rewritten to match that token (`<[id]>`).

    In llguidance a quoted literal only matches text tokens, but many models emit their call
    markers (`<tool_call>` in Qwen, `<|python_tag|>` in Llama) as single special tokens; left
    quoted, the model would be forced to spell them out of ordinary tokens. `%json {...}` bodies
    are JSON, not Lark, and are left alone.
    """
    if not special_tokens:
        return grammar_lark
    names = sorted(special_tokens, key=len, reverse=True)
    split = re.compile("(" + "|".join(re.escape(n) for n in names) + ")")
    out: list[str] = []
    at = 0
    decoder = json.JSONDecoder()
    while at < len(grammar_lark):
        json_at = grammar_lark.find("%json", at)
        string = _LARK_STRING.search(grammar_lark, at)
        if json_at >= 0 and (string is None or json_at < string.start()):
            body_at = grammar_lark.index("{", json_at)
            _, end = decoder.raw_decode(grammar_lark, body_at)
            out.append(grammar_lark[at:end])
            at = end
            continue
        if string is None:
            out.append(grammar_lark[at:])
            break
        out.append(grammar_lark[at : string.start()])
        text = json.loads(string.group(0))
        parts = [p for p in split.split(text) if p]
        pieces = [
            f"<[{special_tokens[p]}]>" if p in special_tokens else json.dumps(p, ensure_ascii=False)
            for p in parts
        ]
        out.append(" ".join(pieces) if pieces else string.group(0))
        at = string.end()
    return "".join(out)


def special_tokens_of(hf_tokenizer: Any) -> dict[str, int]:
    """The model's added tokens (text -> id) that markers may be.

    Special or not (Qwen's `<tool_call>` is an added, non-special token): the tokenizer splits
    an added token's text off before BPE, so the model can only write it as that one token,
    and llguidance must be told so.
    """
    added = getattr(hf_tokenizer, "added_tokens_decoder", {}) or {}
    return {token.content: token_id for token_id, token in added.items() if len(token.content) > 1}


def _unsupported(error: str) -> str:
    """llguidance's 'Unimplemented keys: ["not"]' as something a user can act on."""
    if "Unimplemented keys" in error:
        keys = error.split("Unimplemented keys:", 1)[1].strip()
        return f"The schema uses keywords constrained decoding does not support: {keys}; remove them."
    return f"The schema cannot be compiled for constrained decoding: {error.strip()}"


async def build_matcher(tokenizer: LLTokenizer, grammar: str, param: str) -> LLMatcher:
    """A fresh matcher for one request; a grammar error or a slow compile is a 400."""

    def build() -> LLMatcher:
        return LLMatcher(tokenizer, grammar, log_level=0, limits=LLParserLimits())

    try:
        matcher = await asyncio.wait_for(asyncio.to_thread(build), COMPILE_TIMEOUT_SECONDS)
    except TimeoutError:
        raise APIError(
            400,
            f"The schema took longer than {COMPILE_TIMEOUT_SECONDS:.0f} s to compile; simplify it.",
            param=param,
            code="schema_too_complex",
        ) from None
    if matcher.is_error():
        raise APIError(400, _unsupported(matcher.get_error()), param=param, code="unsupported_schema")
    return matcher


def _metal_mask(logits: mx.array, bitmask: bytes) -> mx.array:
    from llguidance.mlx import apply_token_bitmask  # a Metal kernel: only with Metal

    masked: mx.array = apply_token_bitmask(logits, np.frombuffer(bitmask, dtype=np.int32))
    return masked


def _cpu_mask(logits: mx.array, bitmask: bytes) -> mx.array:
    vocab = logits.shape[-1]
    allowed = np.unpackbits(np.frombuffer(bitmask, dtype=np.uint8), bitorder="little")[:vocab]
    if allowed.shape[0] < vocab:  # model rows past the tokenizer's vocabulary are never valid
        allowed = np.pad(allowed, (0, vocab - allowed.shape[0]))
    return mx.where(mx.array(allowed.astype(np.bool_)), logits, -mx.inf)


# In the last this-many tokens of max_tokens (a quarter of it for small budgets), tokens that
# close a string, array or object are pushed up (among those the grammar allows), so the reply
# ends as valid JSON with shorter values instead of being cut off mid-value.
CLOSING_WINDOW = 24
CLOSING_BONUS = 30.0


class GrammarProcessor:
    """The logits processor of one request: advances its matcher by each sampled token.

    Near the end of `max_tokens` it pushes the reply to close what it has open, within the
    grammar, so the result stays valid: inside a JSON string the tokens that end it, outside
    one the tokens that close arrays and objects (it follows the JSON string state of the text
    so far to know which; `]` inside a string is just text).
    """

    def __init__(
        self,
        matcher: LLMatcher,
        *,
        tokenizer: LLTokenizer | None = None,
        max_tokens: int | None = None,
        closers: tuple[list[int], list[int]] | None = None,
    ) -> None:
        self.matcher = matcher
        self._tokenizer = tokenizer
        self._prompt_length: int | None = None
        self._generated = 0
        self._max_tokens = max_tokens
        self._window = min(CLOSING_WINDOW, max(4, (max_tokens or 0) // 4))
        self._quotes = mx.array(closers[0]) if closers and closers[0] else None
        self._brackets = mx.array(closers[1]) if closers and closers[1] else None
        self._in_string = False
        self._escaped = False
        self._apply = _metal_mask if mx.metal.is_available() else _cpu_mask

    def __call__(self, tokens: mx.array, logits: mx.array) -> mx.array:
        # mlx-lm passes the prompt first, then the prompt plus every token sampled so far.
        if self._prompt_length is None:
            self._prompt_length = int(tokens.shape[0])
        else:
            token: int = tokens[-1].item()  # type: ignore[assignment]  # token ids are ints
            if not self.matcher.consume_token(token):
                raise RuntimeError(f"constrained decoding lost the grammar: {self.matcher.get_error()}")
            self._generated += 1
            if self._tokenizer is not None:
                self._track_strings(self._tokenizer.decode_bytes([token]))
        if self._max_tokens is not None and self._max_tokens - self._generated <= self._window:
            closers = self._quotes if self._in_string else self._brackets
            if closers is not None:
                logits = logits.at[:, closers].add(CLOSING_BONUS)
        return self._apply(logits, self.matcher.compute_bitmask())

    def _track_strings(self, text: bytes) -> None:
        for byte in text:
            if self._escaped:
                self._escaped = False
            elif byte == 0x5C and self._in_string:  # backslash
                self._escaped = True
            elif byte == 0x22:  # quote
                self._in_string = not self._in_string
