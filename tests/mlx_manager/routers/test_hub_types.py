"""Hub search filtered by model type, through the hub's pipeline tags (local hub server)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from mlx_manager.services.hub import HubConfig, search_models
from tests.conftest import CONFIG_ONLY, SMOLLM_REPO
from tests.hub_server import HubRepo, HubServer

GIB = 1024**3
MINILM, BGE = "mlx-community/all-MiniLM-L6-v2-bf16", "mlx-community/bge-small-en-v1.5-bf16"
QWEN_VL = "mlx-community/Qwen2.5-VL-3B-Instruct-4bit"


@pytest.fixture
def typed_hub(hub: HubServer) -> HubServer:
    """The hub with two embedding models, one under each pipeline tag embedding models carry."""
    for repo_id, tag, downloads, likes in (
        (MINILM, "sentence-similarity", 700, 50),
        (BGE, "feature-extraction", 800, 5),
    ):
        hub.repos[repo_id] = HubRepo(
            repo_id, [CONFIG_ONLY], downloads=downloads, likes=likes, pipeline_tag=tag, tags=["mlx", tag]
        )
    return hub


def _ids(hub: HubServer, tmp_path: Path, **kwargs: object) -> list[str]:
    config = HubConfig(endpoint=hub.url, token=None, cache_dir=tmp_path / "cache")
    return [m.repo_id for m in search_models(config, query="", budget_bytes=GIB, **kwargs)]


def test_embeddings_merge_both_pipeline_tags_in_the_chosen_order(
    typed_hub: HubServer, tmp_path: Path
) -> None:
    assert _ids(typed_hub, tmp_path, model_type="embeddings") == [BGE, MINILM]
    assert _ids(typed_hub, tmp_path, model_type="embeddings", sort="likes") == [MINILM, BGE]
    text = _ids(typed_hub, tmp_path, model_type="text-gen")
    assert SMOLLM_REPO in text and MINILM not in text and BGE not in text
    assert {MINILM, BGE, SMOLLM_REPO} <= set(_ids(typed_hub, tmp_path))


def test_the_search_form_offers_the_type_and_the_results_follow_it(
    hub_cache: Path, typed_hub: HubServer, client: TestClient
) -> None:
    page = client.get("/hub/search", params={"model_type": "embeddings"})
    assert re.findall(r'data-repo-id="([^"]+)"', page.text) == [BGE, MINILM]
    form = client.get("/models", params={"q": "", "model_type": "embeddings"}).text
    assert '<option value="embeddings" selected>Embeddings</option>' in form
    assert re.findall(r'data-repo-id="([^"]+)"', form) == [BGE, MINILM]
    assert client.get("/hub/search", params={"model_type": "music"}).status_code == 422


def test_vision_asks_the_hub_for_image_text_to_text(
    hub_cache: Path, typed_hub: HubServer, client: TestClient
) -> None:
    typed_hub.repos[QWEN_VL] = HubRepo(
        QWEN_VL, [CONFIG_ONLY], pipeline_tag="image-text-to-text", tags=["mlx", "image-text-to-text"]
    )
    form = client.get("/models", params={"q": "", "model_type": "vision"}).text
    assert '<option value="vision" selected>Vision (image-text-to-text)</option>' in form
    assert re.findall(r'data-repo-id="([^"]+)"', form) == [QWEN_VL]
    assert QWEN_VL not in _ids(typed_hub, hub_cache.parent, model_type="text-gen")


@pytest.mark.parametrize(
    ("model_type", "label", "tag", "repo_id"),
    [
        ("stt", "Speech to text", "automatic-speech-recognition", "mlx-community/whisper-tiny-asr-fp16"),
        ("tts", "Text to speech", "text-to-speech", "mlx-community/Kokoro-82M-bf16"),
    ],
)
def test_speech_models_are_found_by_their_pipeline_tag(
    hub_cache: Path,
    typed_hub: HubServer,
    client: TestClient,
    model_type: str,
    label: str,
    tag: str,
    repo_id: str,
) -> None:
    typed_hub.repos[repo_id] = HubRepo(repo_id, [CONFIG_ONLY], pipeline_tag=tag, tags=["mlx", tag])
    form = client.get("/models", params={"q": "", "model_type": model_type}).text
    assert f'<option value="{model_type}" selected>{label}</option>' in form
    assert re.findall(r'data-repo-id="([^"]+)"', form) == [repo_id]
    assert repo_id not in _ids(typed_hub, hub_cache.parent, model_type="text-gen")
