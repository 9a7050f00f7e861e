"""POST /tokenize and /detokenize (vLLM's shape) on `mlx-manager serve` with SmolLM2: the chat
template and tokenizer generation uses, so the count equals count_tokens and the usage."""

from __future__ import annotations

import httpx

from mlx_server.models.store import DEFAULT_MODEL_ID
from tests.support import ServerProcess

MESSAGES = [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "Name a colour."},
]


def test_a_chat_tokenizes_to_what_generation_and_count_tokens_count(inference_server: ServerProcess) -> None:
    url = inference_server.url
    body = {"model": DEFAULT_MODEL_ID, "messages": MESSAGES}
    tokenized = httpx.post(f"{url}/tokenize", json={**body, "return_token_strs": True}, timeout=300)
    assert tokenized.status_code == 200, tokenized.text
    shape = tokenized.json()
    assert set(shape) == {"count", "max_model_len", "tokens", "token_strs"}
    assert shape["count"] == len(shape["tokens"]) == len(shape["token_strs"]) > 0
    assert all(isinstance(t, int) for t in shape["tokens"]) and shape["max_model_len"] == 8192
    assert shape["token_strs"][0] == "<|im_start|>"
    chat = httpx.post(f"{url}/v1/chat/completions", json={**body, "max_tokens": 1}, timeout=300).json()
    counted = httpx.post(
        f"{url}/v1/messages/count_tokens",
        json={"model": DEFAULT_MODEL_ID, "system": "You are terse.", "messages": MESSAGES[1:]},
        timeout=300,
    ).json()
    assert shape["count"] == chat["usage"]["prompt_tokens"] == counted["input_tokens"]

    v1 = httpx.post(f"{url}/v1/tokenize", json=body, timeout=300).json()
    assert v1 == {**shape, "token_strs": None}
    bare = httpx.post(f"{url}/tokenize", json={**body, "add_generation_prompt": False}, timeout=300).json()
    assert bare["tokens"] == shape["tokens"][: bare["count"]] and bare["count"] < shape["count"]
    text = httpx.post(f"{url}/detokenize", json={"model": DEFAULT_MODEL_ID, "tokens": shape["tokens"]}).json()
    assert text["prompt"].endswith("<|im_start|>assistant\n") and "Name a colour." in text["prompt"]


def test_a_prompt_round_trips_and_bad_input_is_a_clear_400(inference_server: ServerProcess) -> None:
    url = inference_server.url
    prompt = {"model": DEFAULT_MODEL_ID, "prompt": "Hello world"}
    tokens = httpx.post(f"{url}/tokenize", json=prompt, timeout=300).json()["tokens"]
    back = httpx.post(f"{url}/detokenize", json={"model": DEFAULT_MODEL_ID, "tokens": tokens}, timeout=300)
    assert back.json() == {"prompt": "Hello world"}
    both = httpx.post(f"{url}/tokenize", json={**prompt, "messages": MESSAGES}, timeout=300)
    assert both.status_code == 400 and "either prompt" in both.json()["error"]["message"]
    bad = httpx.post(f"{url}/detokenize", json={"model": DEFAULT_MODEL_ID, "tokens": [1, 10**9]}, timeout=300)
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "tokens[1]"
    unknown = httpx.post(f"{url}/tokenize", json={**prompt, "model": "nope"}, timeout=300)
    assert unknown.status_code == 404
