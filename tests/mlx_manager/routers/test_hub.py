"""Hub search, the memory fit estimate, and the hub settings (against tests/hub_server.py)."""

from __future__ import annotations

import re
import struct
import time
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from huggingface_hub import constants as hf_constants
from sqlmodel import Session

from mlx_manager.services.hub import (
    HubConfig,
    HubError,
    check_repo,
    check_repo_id,
    estimate_memory,
    kv_cache_bytes,
    kv_cache_bytes_from_config,
    quantization_bits,
    search_models,
    weights_bytes,
)
from mlx_manager.services.settings_store import (
    AUTO_PROBE,
    HUB_CACHE_DIR,
    HUB_ENDPOINT,
    HUB_TOKEN,
    SettingError,
    display_value,
    get_setting,
    mask_secret,
    set_setting,
)
from tests.conftest import GATED_REPO, SMOLLM_REPO
from tests.hub_server import HubServer
from tests.support import free_port

GIB = 1024**3
SMOLLM_SHAPES = {"num_hidden_layers": 30, "num_attention_heads": 9, "num_key_value_heads": 3, "head_dim": 64}


def test_kv_cache_is_keys_and_values_per_layer_head_and_position_in_float16() -> None:
    # Llama 3 8B at 4096 tokens: 2 x 32 layers x 8 KV heads x 128 dims x 4096 x 2 bytes = 512 MiB.
    assert kv_cache_bytes(layers=32, kv_heads=8, head_dim=128, context_tokens=4096) == 512 * 2**20
    assert kv_cache_bytes_from_config(SMOLLM_SHAPES, 4096) == 2 * 30 * 3 * 64 * 4096 * 2


def test_kv_cache_shapes_fall_back_to_attention_heads_and_hidden_size() -> None:
    # No num_key_value_heads (no GQA) and no head_dim: hidden_size / heads.
    config = {"text_config": {"num_hidden_layers": 2, "num_attention_heads": 4, "hidden_size": 256}}
    assert kv_cache_bytes_from_config(config, 10) == 2 * 2 * 4 * 64 * 10 * 2
    assert kv_cache_bytes_from_config({"model_type": "llama"}, 4096) is None


def test_fit_compares_weights_plus_kv_cache_with_the_budget() -> None:
    kv = kv_cache_bytes_from_config(SMOLLM_SHAPES, 4096)
    assert kv is not None
    exact = estimate_memory(100 * 2**20, SMOLLM_SHAPES, budget_bytes=100 * 2**20 + kv)
    assert exact.total_bytes == 100 * 2**20 + kv
    assert exact.kv_from_config and exact.fits
    assert not estimate_memory(100 * 2**20, SMOLLM_SHAPES, budget_bytes=100 * 2**20 + kv - 1).fits


def test_fit_without_layer_shapes_takes_a_share_of_the_weights() -> None:
    estimate = estimate_memory(4 * GIB, None, budget_bytes=16 * GIB)
    assert not estimate.kv_from_config
    assert estimate.kv_cache_bytes == int(4 * GIB * 0.15)
    assert estimate.fits


def test_weights_bytes_counts_each_dtype_at_its_width() -> None:
    assert weights_bytes({"U32": 10, "BF16": 4, "F32": 1, "I8": 3}) == 10 * 4 + 4 * 2 + 4 + 3


@pytest.mark.parametrize(
    ("repo_id", "tags", "config", "bits"),
    [
        ("a/b", [], {"quantization": {"bits": 4, "group_size": 32}}, 4),
        ("a/b", [], {"quantization_config": {"bits": 8}}, 8),
        ("a/b", ["mlx", "6-bit"], {}, 6),
        ("mlx-community/Qwen2.5-0.5B-Instruct-3bit", [], None, 3),
        ("mlx-community/Qwen2.5-0.5B-Instruct-bf16", ["mlx"], {}, None),
    ],
)
def test_quantization_bits_from_config_then_tags_then_name(
    repo_id: str, tags: list[str], config: dict[str, object] | None, bits: int | None
) -> None:
    assert quantization_bits(repo_id, tags, config) == bits


def _config(hub: HubServer, tmp_path: Path, token: str | None = None) -> HubConfig:
    return HubConfig(endpoint=hub.url, token=token, cache_dir=tmp_path / "cache")


def test_search_defaults_to_mlx_community_sorted_by_downloads(hub: HubServer, tmp_path: Path) -> None:
    results = search_models(_config(hub, tmp_path), query="", budget_bytes=16 * GIB)
    assert [r.repo_id for r in results] == [
        "mlx-community/Llama-3-8B-Instruct-4bit",
        SMOLLM_REPO,
        "mlx-community/Giant-405B-8bit",
        GATED_REPO,
    ]
    smollm = results[1]
    weights = hub.repos[SMOLLM_REPO].file("model.safetensors")
    assert weights is not None and weights.source is not None
    header = 8 + struct.unpack("<Q", weights.source.read_bytes()[:8])[0]
    assert smollm.size_bytes == weights.size - header  # the tensors, counted from the dtype totals
    assert smollm.quantization_bits == 4
    assert (smollm.downloads, smollm.likes) == (900, 15)
    assert smollm.last_modified is not None and smollm.last_modified.year == 2026
    assert smollm.estimate is not None and smollm.estimate.kv_from_config and smollm.estimate.fits
    giant = results[2]
    assert giant.quantization_bits == 8  # from its "8-bit" tag
    assert giant.estimate is not None and not giant.estimate.fits
    assert results[3].gated


def test_search_sorts_by_likes_and_by_recency_and_filters_by_query(hub: HubServer, tmp_path: Path) -> None:
    config = _config(hub, tmp_path)
    by_likes = search_models(config, query="", sort="likes", budget_bytes=GIB)
    assert [r.likes for r in by_likes] == sorted((r.likes for r in by_likes), reverse=True)
    assert by_likes[0].repo_id == "mlx-community/Giant-405B-8bit"
    recent = search_models(config, query="", sort="recent", budget_bytes=GIB)
    assert recent[0].repo_id == "mlx-community/Giant-405B-8bit"
    assert recent[1].repo_id == SMOLLM_REPO
    found = search_models(config, query="smollm2", author="", budget_bytes=GIB)
    assert {r.repo_id for r in found} == {SMOLLM_REPO, GATED_REPO, "someone-else/SmolLM2-135M-Instruct"}
    assert hub.requests[-1].path == "/api/models"


def test_search_page_lists_results_with_download_forms(
    hub_cache: Path, hub: HubServer, client: TestClient
) -> None:
    page = client.get("/hub/search", params={"q": "SmolLM2", "sort": "likes"})
    assert page.status_code == 200
    assert re.findall(r'data-repo-id="([^"]+)"', page.text) == [SMOLLM_REPO, GATED_REPO]
    assert 'data-fits="yes"' in page.text
    assert "4-bit" in page.text
    assert page.text.count('name="repo_id"') == 2
    assert f'name="csrf_token" value="{client.cookies["mlx_csrf"]}"' in page.text
    assert client.get("/hub/search", params={"sort": "newest"}).status_code == 422


def test_search_says_when_the_hub_cannot_be_reached(session: Session, client: TestClient) -> None:
    set_setting(session, HUB_ENDPOINT, f"http://127.0.0.1:{free_port()}")
    started = time.monotonic()
    page = client.get("/hub/search", params={"q": "x"})
    # One try: huggingface_hub's five retries with backoff took ~23 s; 10 s allows a busy machine.
    assert time.monotonic() - started < 10
    assert page.status_code == 502
    assert "Cannot reach the hub at http://127.0.0.1:" in page.text


def test_gated_repo_needs_the_hub_token(hub: HubServer, tmp_path: Path) -> None:
    with pytest.raises(HubError) as refused:
        check_repo(_config(hub, tmp_path), GATED_REPO, "main")
    assert refused.value.status_code == 403
    assert "set a hub token" in refused.value.message
    check_repo(_config(hub, tmp_path, token=hub.token), GATED_REPO, "main")
    with pytest.raises(HubError) as missing:
        check_repo(_config(hub, tmp_path), "mlx-community/nope", "main")
    assert missing.value.status_code == 404


@pytest.mark.parametrize("repo_id", ["no-slash", "a/b/c", "../etc/passwd", "a/b c", ""])
def test_malformed_repo_ids_are_refused_with_400(repo_id: str) -> None:
    with pytest.raises(HubError) as refused:
        check_repo_id(repo_id)
    assert refused.value.status_code == 400


def test_settings_default_to_huggingface_hub_and_keep_overrides(session: Session, tmp_path: Path) -> None:
    assert get_setting(session, HUB_ENDPOINT) == hf_constants.ENDPOINT
    assert get_setting(session, HUB_CACHE_DIR) == hf_constants.HF_HUB_CACHE
    assert get_setting(session, HUB_TOKEN) is None
    assert get_setting(session, AUTO_PROBE) is True
    set_setting(session, HUB_ENDPOINT, "http://127.0.0.1:1234")
    set_setting(session, AUTO_PROBE, False)
    assert get_setting(session, HUB_ENDPOINT) == "http://127.0.0.1:1234"
    assert get_setting(session, AUTO_PROBE) is False
    set_setting(session, HUB_ENDPOINT, None)
    assert get_setting(session, HUB_ENDPOINT) == hf_constants.ENDPOINT
    with pytest.raises(SettingError, match="http"):
        set_setting(session, HUB_ENDPOINT, "huggingface.co")
    with pytest.raises(SettingError, match="absolute"):
        set_setting(session, HUB_CACHE_DIR, "relative/cache")


def test_hub_token_is_only_ever_shown_masked(session: Session) -> None:
    token = "hf_SecretSecretSecretabcd"
    set_setting(session, HUB_TOKEN, token)
    assert get_setting(session, HUB_TOKEN) == token
    assert display_value(session, HUB_TOKEN) == "hf_…abcd"
    assert mask_secret(None) == "not set"
    assert "Secret" not in mask_secret("shorttok")
