"""The model probe with the real SmolLM2: steps, stored capabilities, pool hygiene, errors."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlmodel import Session, select

from mlx_server.config import reset_settings
from mlx_server.database import get_engine, upgrade_database
from mlx_server.errors import ModelNotFoundError
from mlx_server.models.adapters import FAMILY_REGISTRY
from mlx_server.models.cpu_weights import loaded_bytes_estimate
from mlx_server.models.detection import detect_model_family, read_chat_template, read_config
from mlx_server.models.pool import get_model_pool, reset_model_pool
from mlx_server.parsers.base import make_tool_call
from mlx_server.parsers.hermes import HermesJsonParser
from mlx_server.parsers.mistral import MistralParser
from mlx_server.parsers.thinking import ThinkTagParser
from mlx_server.records import ModelCapabilities, ModelRecord, ModelSource
from mlx_server.services.operations.probe import (
    STEP_NAMES,
    ProbeRunningError,
    _tool_detail,
    is_probe_running,
    probe_model,
)
from mlx_server.services.operations.probe_parsers import find_thinking_parser, find_tool_parser
from mlx_server.services.operations.probe_steps import ProbeStep
from mlx_server.utils.memory import GB, kv_bytes_per_token, practical_max_tokens
from mlx_server.utils.metal import reset_metal_thread

SMOLLM_CONFIG = {
    "num_hidden_layers": 30,
    "num_attention_heads": 9,
    "num_key_value_heads": 3,
    "head_dim": 64,
    "hidden_size": 576,
    "max_position_embeddings": 8192,
}
# A ChatML template that renders tools itself and opens a <think> block on request.
THINKING_TOOLS_TEMPLATE = (
    "{%- if tools %}<|im_start|>system\nYou may call these functions:\n"
    "{% for tool in tools %}{{ tool | tojson }}\n{% endfor %}"
    'Call one as <tool_call>{"name": ..., "arguments": {...}}</tool_call><|im_end|>\n{% endif %}'
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] "
    "+ '<|im_end|>\\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}"
    "{% if enable_thinking %}{{ '<think>\\n' }}{% endif %}{% endif %}"
)


def _register(model_id: str, path: Path) -> None:
    with Session(get_engine()) as session:
        session.add(ModelRecord(id=model_id, source=ModelSource.LOCAL, path=str(path)))
        session.commit()


@pytest.fixture
def smol(home: Path, smollm_dir: Path) -> Iterator[str]:
    upgrade_database()
    _register("smol", smollm_dir)
    yield "smol"
    reset_model_pool()
    reset_metal_thread()


def _stored(model_id: str) -> list[ModelCapabilities]:
    with Session(get_engine()) as session:
        rows = list(session.exec(select(ModelCapabilities).where(ModelCapabilities.model_id == model_id)))
        for row in rows:
            session.expunge(row)
        return rows


# --- The arithmetic and the parser search, without a model ---


def test_kv_cache_size_follows_layers_kv_heads_head_dim_and_dtype() -> None:
    assert kv_bytes_per_token(SMOLLM_CONFIG, 4) == 2 * 30 * 3 * 64 * 4
    no_head_dim = {k: v for k, v in SMOLLM_CONFIG.items() if k != "head_dim"}
    assert kv_bytes_per_token(no_head_dim, 2) == 2 * 30 * 3 * (576 // 9) * 2
    no_kv_heads = {k: v for k, v in SMOLLM_CONFIG.items() if k != "num_key_value_heads"}
    assert kv_bytes_per_token(no_kv_heads, 2) == 2 * 30 * 9 * 64 * 2  # plain multi-head attention
    assert kv_bytes_per_token({"text_config": SMOLLM_CONFIG}, 2) == 2 * 30 * 3 * 64 * 2  # multimodal
    assert kv_bytes_per_token({"max_position_embeddings": 4096}, 2) is None


def test_practical_max_tokens_is_what_fits_beside_the_weights_capped_by_the_context() -> None:
    per_token = 2 * 30 * 3 * 64 * 4
    weights = 115 * 2**20
    memory_bound = practical_max_tokens(
        SMOLLM_CONFIG, budget_bytes=weights + 1000 * per_token + 7, weights_bytes=weights, dtype_bytes=4
    )
    assert memory_bound == 1000
    roomy = practical_max_tokens(SMOLLM_CONFIG, budget_bytes=64 * GB, weights_bytes=weights, dtype_bytes=4)
    assert roomy == 8192
    too_small = practical_max_tokens(
        SMOLLM_CONFIG, budget_bytes=weights // 2, weights_bytes=weights, dtype_bytes=4
    )
    assert too_small == 0
    unknown_shape = {"max_position_embeddings": 4096}
    assert practical_max_tokens(unknown_shape, budget_bytes=GB, weights_bytes=0, dtype_bytes=2) == 4096


def test_the_family_default_tool_parser_is_tried_first_then_every_registered_one() -> None:
    weather = [make_tool_call("get_weather", {"city": "Paris"})]
    hermes_call = HermesJsonParser().render_calls(weather)
    assert find_tool_parser("hermes_json", hermes_call) == "hermes_json"
    # glm4_native also reads hermes JSON, and as the family default it wins over hermes_json.
    assert find_tool_parser("glm4_native", hermes_call) == "glm4_native"
    assert find_tool_parser("hermes_json", MistralParser().render_calls(weather)) == "mistral"
    other_tool = MistralParser().render_calls([make_tool_call("get_time", {})])
    assert find_tool_parser("hermes_json", other_tool) == "null"
    assert find_tool_parser("hermes_json", "The weather in Paris is sunny.") == "null"


def test_a_call_written_as_fenced_json_keeps_the_family_default() -> None:
    """Qwen2.5-Coder writes its call as a fenced JSON object; inference takes it with any parser
    (services/pipeline/json_calls.py), so the family default stands, and the detail says how."""
    fenced = '```json\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n```'
    assert find_tool_parser("hermes_json", fenced) == "hermes_json"
    assert find_tool_parser("hermes_json", fenced.replace("get_weather", "get_time")) == "null"
    assert "written as plain JSON" in _tool_detail("hermes_json", "hermes_json", fenced)


def test_thinking_parsers_read_reasoning_also_after_a_block_the_prompt_opened() -> None:
    assert ThinkTagParser().validates("<think>17 + 25 = 42</think>42")
    assert not ThinkTagParser().validates("42")
    turn = "<|im_start|>assistant\n"
    assert find_thinking_parser("null", turn, "<think>carry the one</think>42") == "think_tag"
    assert find_thinking_parser("null", turn + "<think>\n", "carry the one</think>42") == "think_tag"
    assert find_thinking_parser("null", turn + "<think>\n", "carry the one") == "think_tag"  # cut off
    assert find_thinking_parser("null", turn, "carry the one, 42") == "null"
    assert find_thinking_parser("null", turn, "[THINK]sum[/THINK]42") == "mistral_think"


# --- The real model ---


def test_probe_streams_its_steps_stores_capabilities_and_unloads_the_model(
    smol: str, smollm_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A budget of the weights plus 100 MiB leaves room for ~2 000 tokens of SmolLM2's float32 KV
    # cache, under its 8 192.
    weights = loaded_bytes_estimate(smollm_dir, read_config(smollm_dir))
    monkeypatch.setenv("MLX_SERVER_MAX_MEMORY_GB", str((weights + 100 * 2**20) / GB))
    reset_settings()  # read again, with the budget, by the pool this probe creates
    seen: list[tuple[ProbeStep, bool]] = []

    def on_step(step: ProbeStep) -> None:
        seen.append((step, get_model_pool().get_loaded(smol) is not None))

    capabilities = asyncio.run(probe_model(smol, on_step=on_step))

    steps = [step for step, _ in seen]
    assert [(s.name, s.status) for s in steps[::2]] == [(name, "running") for name in STEP_NAMES]
    results = {s.name: s for s in steps[1::2]}
    assert list(results) == list(STEP_NAMES)
    assert all(s.status == "ok" for s in results.values()), steps
    loaded_during = {(step.name, step.status): loaded for step, loaded in seen}
    assert loaded_during[("tool_calls", "running")]  # reported live, while the model works
    assert not loaded_during[("unload", "ok")]
    assert get_model_pool().get_loaded(smol) is None

    config = read_config(smollm_dir)
    assert capabilities.model_type == "text-gen"
    assert capabilities.model_family == detect_model_family(smol, config, read_chat_template(smollm_dir))
    assert capabilities.supports_native_tools is False  # SmolLM2's template ignores tools
    # Verified ("injection": the call format goes into the system prompt), or unverified and
    # kept at the family's default format so forced calls still have a grammar.
    assert capabilities.tool_parser_id not in (None, "null")
    if capabilities.tool_format is None:
        family = FAMILY_REGISTRY[capabilities.model_family or "default"]
        assert capabilities.tool_parser_id == family.default_tool_parser().parser_id
    else:
        assert capabilities.tool_format == "injection"
    assert (capabilities.thinking_parser_id, capabilities.supports_thinking) == ("null", False)
    assert capabilities.practical_max_tokens is not None
    assert 0 < capabilities.practical_max_tokens < config["max_position_embeddings"]
    assert "get_weather" in results["tool_calls"].detail  # the tool step says what the model wrote
    [stored] = _stored(smol)
    assert stored.model_dump() == capabilities.model_dump()


def test_a_pinned_model_stays_loaded_takes_the_new_parsers_and_a_reprobe_updates_probed_at(
    smol: str,
) -> None:
    async def main() -> tuple[ModelCapabilities, ModelCapabilities, list[ProbeStep]]:
        pool = get_model_pool()
        loaded = await pool.preload(smol, pin=True)
        assert not loaded.probed and loaded.adapter.tool_parser.parser_id == "hermes_json"
        steps: list[ProbeStep] = []
        first = await probe_model(smol, on_step=steps.append)
        assert pool.get_loaded(smol) is loaded
        assert loaded.probed
        assert loaded.adapter.tool_parser.parser_id == first.tool_parser_id
        second = await probe_model(smol)
        assert pool.get_loaded(smol) is loaded
        return first, second, steps

    first, second, steps = asyncio.run(main())
    unload = [s for s in steps if s.name == "unload"][-1]
    assert (unload.status, unload.detail) == ("skipped", "left loaded: it is pinned")
    assert second.probed_at > first.probed_at
    [stored] = _stored(smol)
    assert stored.probed_at == second.probed_at


def test_a_second_probe_of_a_model_is_refused_while_one_runs_and_a_cancelled_one_cleans_up(
    smol: str,
) -> None:
    async def main() -> list[ProbeStep]:
        steps: list[ProbeStep] = []
        generating = asyncio.Event()

        def on_step(step: ProbeStep) -> None:
            steps.append(step)
            if (step.name, step.status) == ("tool_calls", "running"):
                generating.set()

        first = asyncio.create_task(probe_model(smol, on_step=on_step))
        await generating.wait()
        with pytest.raises(ProbeRunningError) as caught:
            await probe_model(smol)
        assert caught.value.status == 409 and "already running" in caught.value.message
        first.cancel()
        with pytest.raises(asyncio.CancelledError):
            await first
        return steps

    steps = asyncio.run(main())
    assert ProbeStep("tool_calls", "failed", "CancelledError") in steps
    assert steps[-1] == ProbeStep("unload", "ok", "unloaded")
    assert not is_probe_running(smol)
    assert get_model_pool().get_loaded(smol) is None
    assert _stored(smol) == []  # a probe that did not finish stores nothing


def test_probing_an_unknown_model_fails_at_detection_with_a_clear_error(smol: str) -> None:
    steps: list[ProbeStep] = []
    with pytest.raises(ModelNotFoundError) as caught:
        asyncio.run(probe_model("no-such-model", on_step=steps.append))
    assert "'no-such-model' does not exist" in caught.value.message
    assert steps == [
        ProbeStep("detect", "running"),
        ProbeStep("detect", "failed", caught.value.message),
    ]
    assert get_model_pool().status()["models"] == []


def test_a_template_that_renders_tools_and_toggles_thinking_is_probed_as_such(
    smol: str, smollm_dir: Path, tmp_path: Path
) -> None:
    """SmolLM2's weights behind a template with native tools and an enable_thinking switch."""
    model_dir = tmp_path / "smol-think"
    model_dir.mkdir()
    for item in smollm_dir.iterdir():
        if item.name != "tokenizer_config.json":
            (model_dir / item.name).symlink_to(item)
    tokenizer_config = json.loads((smollm_dir / "tokenizer_config.json").read_text())
    tokenizer_config["chat_template"] = THINKING_TOOLS_TEMPLATE
    (model_dir / "tokenizer_config.json").write_text(json.dumps(tokenizer_config))
    _register("smol-think", model_dir)

    steps: list[ProbeStep] = []
    capabilities = asyncio.run(probe_model("smol-think", on_step=steps.append))

    assert capabilities.supports_native_tools is True
    assert capabilities.tool_parser_id != "null" and capabilities.tool_format in (None, "native")
    assert (capabilities.thinking_parser_id, capabilities.supports_thinking) == ("think_tag", True)
    thinking = [s for s in steps if s.name == "thinking"][-1]
    assert thinking == ProbeStep("thinking", "ok", "think_tag reasoning in a reply with enable_thinking")
    assert [s for s in steps if s.name == "native_tools"][
        -1
    ].detail == "the chat template renders tools itself"
    assert get_model_pool().get_loaded("smol-think") is None
