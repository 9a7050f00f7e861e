"""A model's generation options through the admin API, and generation with them through the real
openai SDK: speculative decoding with a draft model (SmolLM2 itself under a second id, and a tiny
random llama with SmolLM2's vocabulary) gives the same greedy output as without a draft, with the
draft's share of the tokens reported; a quantized KV cache still answers "Paris"."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
from fastapi.testclient import TestClient

from mlx_server.models.store import default_embedding_model_dir
from tests.mlx_server.api.conftest import standalone_server

QUESTION = [{"role": "user", "content": "What is the capital of France? Answer in one word."}]
CITY = {
    "type": "json_schema",
    "json_schema": {
        "name": "city",
        "schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}


@pytest.fixture
def server(
    home: Path, smollm_dir: Path, tiny_draft_dirs: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> Iterator[TestClient]:
    # Quantize the KV cache from the first token, so an 8-bit cache is what answers.
    monkeypatch.setenv("MLX_SERVER_QUANTIZED_KV_START", "0")
    models = {
        "smol": smollm_dir,
        "smol-draft": smollm_dir,  # the same model under a second id: it guesses every token
        "tiny-draft": tiny_draft_dirs["tiny"],
        "other-vocab": tiny_draft_dirs["swapped"],
        "minilm": default_embedding_model_dir(),
    }
    with standalone_server(models) as client:
        yield client


def _patch(server: TestClient, model: str, **options: Any) -> Any:
    return server.patch(f"/v1/admin/models/{model}/options", json=options)


def _error(server: TestClient, model: str, status: int, **options: Any) -> str:
    response = _patch(server, model, **options)
    assert response.status_code == status, response.text
    message: str = response.json()["error"]["message"]
    return message


def test_options_are_checked_with_errors_that_say_what_to_fix(server: TestClient) -> None:
    assert server.get("/v1/admin/models/smol/options").json() == {
        "model_id": "smol",
        "draft_model": None,
        "kv_bits": None,
        "kv_group_size": 64,
    }
    assert "no model 'nope'" in _error(server, "smol", 400, draft_model="nope")
    assert "cannot draft for itself" in _error(server, "smol", 400, draft_model="smol")
    assert "another vocabulary" in _error(server, "smol", 400, draft_model="other-vocab")
    assert "not a local text generation model" in _error(server, "smol", 400, draft_model="minilm")
    assert "kv_bits must be 4, 8 or null" in _error(server, "smol", 400, kv_bits=5)
    assert "kv_group_size must be one of" in _error(server, "smol", 400, kv_group_size=48)
    assert "apply to text models" in _error(server, "minilm", 400, kv_bits=8)
    assert _patch(server, "ghost", kv_bits=8).status_code == 404
    assert _patch(server, "smol", kv_bits="eight").status_code == 400
    # Nothing refused was stored; a valid change is, and only the fields sent change.
    assert _patch(server, "smol", draft_model="tiny-draft").json()["draft_model"] == "tiny-draft"
    stored = _patch(server, "smol", kv_bits=4).json()
    assert stored == {"model_id": "smol", "draft_model": "tiny-draft", "kv_bits": 4, "kv_group_size": 64}


def _ask(sdk: openai.OpenAI, **extra: Any) -> Any:
    return sdk.chat.completions.create(model="smol", messages=QUESTION, max_tokens=8, temperature=0, **extra)  # type: ignore[arg-type]


def _pool_entry(server: TestClient) -> dict[str, Any]:
    entry: dict[str, Any] = next(
        m for m in server.get("/v1/admin/pool").json()["models"] if m["id"] == "smol"
    )
    return entry


def test_a_draft_keeps_the_greedy_output_and_reports_its_share(server: TestClient) -> None:
    sdk = openai.OpenAI(base_url="http://testserver/v1", api_key="x", http_client=server, max_retries=0)
    plain = _ask(sdk, extra_body={"prompt_lookup": 0})  # no draft of any kind
    reference = plain.choices[0].message.content
    assert "Paris" in reference and plain.usage.completion_tokens_details is None
    constrained = _ask(sdk, response_format=CITY).choices[0].message.content
    assert constrained.startswith('{"city": "')

    _patch(server, "smol", draft_model="tiny-draft").raise_for_status()  # reloads the loaded model
    guessed = _ask(sdk)
    again = _ask(sdk)  # the target's and the draft's caches come back from the prompt cache together
    assert guessed.choices[0].message.content == again.choices[0].message.content == reference
    assert again.usage.prompt_tokens_details.cached_tokens > 0
    random_rate = guessed.usage.model_dump()["draft_acceptance_rate"]
    assert 0 <= random_rate < 0.5, guessed.usage

    _patch(server, "smol", draft_model="smol-draft").raise_for_status()
    drafted = _ask(sdk)
    assert drafted.choices[0].message.content == reference
    # 2 draft tokens per step, the target adds the third: 6 of 8 at most from the draft.
    usage = drafted.usage.model_dump()
    assert (
        usage["draft_acceptance_rate"] >= 0.6
        and usage["completion_tokens_details"]["accepted_prediction_tokens"] >= 5
    )
    entry = _pool_entry(server)
    assert entry["draft_model"] == "smol-draft" and entry["draft_acceptance_rate"] >= 0.6
    # A grammar sees each token once: the draft is asked for none, the output is the same.
    with_grammar = _ask(sdk, response_format=CITY)
    assert with_grammar.choices[0].message.content == constrained
    assert with_grammar.usage.completion_tokens_details is None

    _patch(server, "smol", draft_model=None, kv_bits=8).raise_for_status()
    quantized = _ask(sdk)
    assert "Paris" in quantized.choices[0].message.content
    entry = _pool_entry(server)
    assert entry["draft_model"] is None and entry["kv_bits"] == 8 and entry["kv_group_size"] == 64
