"""Images on every protocol, with the real openai and anthropic SDKs and a tiny random-weight
Qwen2.5-VL built from mlx-vlm's classes (tests/fixtures/tiny_vision_model.py)."""

from __future__ import annotations

import base64
import io
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import anthropic
import openai
import pytest
from fastapi.testclient import TestClient
from PIL import Image
from sqlmodel import Session

from mlx_server.config import reset_settings
from mlx_server.database import get_engine
from mlx_server.records import ModelRecord, ModelSource

VISION, GEMMA3, SMOLVLM = "tiny-vl", "tiny-gemma3", "tiny-smolvlm"
QUESTION = "What is in this picture?"


def png(color: tuple[int, int, int], size: int = 112) -> bytes:
    out = io.BytesIO()
    image = Image.new("RGB", (size, size), color)
    image.putpixel((0, 0), (color[2], color[0], color[1]))  # not uniform: the patches differ
    image.save(out, format="PNG")
    return out.getvalue()


def data_url(data: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(data).decode()


RED, BLUE = png((220, 30, 30)), png((30, 30, 220))


def image_message(*urls: str, text: str = QUESTION) -> dict[str, Any]:
    parts: list[dict[str, Any]] = [{"type": "image_url", "image_url": {"url": url}} for url in urls]
    return {"role": "user", "content": [*parts, {"type": "text", "text": text}]}


class _ImageHandler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "image/png")
        self.send_header("Content-Length", str(len(BLUE)))
        self.end_headers()
        self.wfile.write(BLUE)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def image_url() -> Iterator[str]:
    """A PNG served on 127.0.0.1."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _ImageHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/blue.png"
    server.shutdown()


@pytest.fixture(scope="session")
def tiny_gemma3_dir(tmp_path_factory: pytest.TempPathFactory, smollm_dir: Path) -> Path:
    from tests.fixtures.tiny_vision_model import build_tiny_gemma3_model

    return build_tiny_gemma3_model(tmp_path_factory.mktemp("models") / "tiny-gemma3", smollm_dir)


@pytest.fixture(scope="session")
def tiny_smolvlm_dir(tmp_path_factory: pytest.TempPathFactory, smollm_dir: Path) -> Path:
    from tests.fixtures.tiny_vision_model import build_tiny_smolvlm_model

    return build_tiny_smolvlm_model(tmp_path_factory.mktemp("models") / "tiny-smolvlm", smollm_dir)


@pytest.fixture
def vision_app(
    monkeypatch: pytest.MonkeyPatch,
    smol_app: TestClient,
    tiny_vision_dir: Path,
    tiny_gemma3_dir: Path,
    tiny_smolvlm_dir: Path,
) -> TestClient:
    """The app with SmolLM2 (text only) as "smol", the tiny Qwen2.5-VL as "tiny-vl", the tiny
    Gemma 3 as "tiny-gemma3" and the tiny SmolVLM as "tiny-smolvlm"; image
    URLs on 127.0.0.1 allowed (the fetch policy refuses loopback unless this setting says so;
    tests/mlx_server/api/test_vision_fetch.py checks the refusals)."""
    monkeypatch.setenv("MLX_SERVER_IMAGE_FETCH_ALLOW_PRIVATE_ADDRESSES", "true")
    reset_settings()
    with Session(get_engine()) as session:
        session.add(ModelRecord(id=VISION, source=ModelSource.LOCAL, path=str(tiny_vision_dir)))
        session.add(ModelRecord(id=GEMMA3, source=ModelSource.LOCAL, path=str(tiny_gemma3_dir)))
        session.add(ModelRecord(id=SMOLVLM, source=ModelSource.LOCAL, path=str(tiny_smolvlm_dir)))
        session.commit()
    return smol_app


@pytest.fixture
def sdk(vision_app: TestClient) -> openai.OpenAI:
    return openai.OpenAI(base_url="http://testserver/v1", api_key="x", http_client=vision_app, max_retries=0)


@pytest.fixture
def claude(vision_app: TestClient) -> anthropic.Anthropic:
    return anthropic.Anthropic(
        base_url="http://testserver", api_key="x", http_client=vision_app, max_retries=0
    )


def chat(sdk: openai.OpenAI, messages: list[dict[str, Any]], **kwargs: Any) -> Any:
    args: dict[str, Any] = {"model": VISION, "messages": messages, "temperature": 0, "max_tokens": 3}
    return sdk.chat.completions.create(**{**args, **kwargs})


def test_data_url_image_counts_its_tokens_and_streams(sdk: openai.OpenAI) -> None:
    text_only = chat(sdk, [{"role": "user", "content": QUESTION}])
    with_image = chat(sdk, [image_message(data_url(RED))])
    assert with_image.choices[0].message.role == "assistant"
    # 112x112 pixels: 8x8 patches of 14, merged 2x2 -> 16 image tokens (+ the two vision markers).
    assert with_image.usage.prompt_tokens == text_only.usage.prompt_tokens + 16 + 2
    chunks = list(
        chat(sdk, [image_message(data_url(RED))], stream=True, stream_options={"include_usage": True})
    )
    assert any(c.choices and c.choices[0].delta.content for c in chunks)
    assert chunks[-1].usage is not None and chunks[-1].usage.prompt_tokens == with_image.usage.prompt_tokens
    conversation = [
        image_message(data_url(RED), data_url(BLUE)),
        {"role": "assistant", "content": "Two squares."},
        image_message(data_url(png((10, 200, 10), 56)), text="And this one?"),
    ]
    # Three images in two turns: 16 + 16 + 4 image tokens, each between its two markers.
    assert chat(sdk, conversation).usage.prompt_tokens > with_image.usage.prompt_tokens + 16 + 4 + 4


def top_logprobs(sdk: openai.OpenAI, model: str, *urls: str) -> list[tuple[str, float]]:
    reply = chat(sdk, [image_message(*urls)], model=model, max_tokens=1, logprobs=True, top_logprobs=5)
    return [(t.token, t.logprob) for t in reply.choices[0].logprobs.content[0].top_logprobs]


@pytest.mark.parametrize("model", [VISION, GEMMA3, SMOLVLM])
def test_the_image_reaches_the_model(sdk: openai.OpenAI, image_url: str, model: str) -> None:
    red = top_logprobs(sdk, model, data_url(RED))
    assert top_logprobs(sdk, model, data_url(RED)) == red
    blue = top_logprobs(sdk, model, data_url(BLUE))
    assert blue != red
    assert top_logprobs(sdk, model, image_url) == blue  # the same PNG, fetched over http
    chunks = list(chat(sdk, [image_message(image_url)], model=model, stream=True))
    assert chunks[-1].choices[0].finish_reason in ("stop", "length")


def test_refusals_are_400s_saying_why(sdk: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as error:
        chat(sdk, [image_message("http://127.0.0.1:9/x.png")])  # nothing listens there
    assert "Image 1 was refused" in error.value.message
    with pytest.raises(openai.BadRequestError) as error:
        chat(sdk, [image_message(data_url(RED))], model="smol")
    assert "'smol'" in error.value.message and "vision" in error.value.message
    malformed = {"role": "user", "content": [{"type": "image_url", "image_url": {"detail": "low"}}]}
    with pytest.raises(openai.BadRequestError) as error:
        chat(sdk, [malformed])
    assert error.value.body["param"] == "messages[0].content[0].image_url"  # type: ignore[index]


def test_anthropic_base64_image_block(claude: anthropic.Anthropic) -> None:
    block = {
        "type": "image",
        "source": {"type": "base64", "media_type": "image/png", "data": base64.b64encode(RED).decode()},
    }
    messages: Any = [{"role": "user", "content": [block, {"type": "text", "text": QUESTION}]}]
    reply = claude.messages.create(model=VISION, max_tokens=3, messages=messages)
    assert reply.role == "assistant" and reply.usage.output_tokens >= 1
    count = claude.messages.count_tokens(model=VISION, messages=messages)
    text_count = claude.messages.count_tokens(model=VISION, messages=[{"role": "user", "content": QUESTION}])
    assert count.input_tokens == reply.usage.input_tokens == text_count.input_tokens + 16 + 2
    with claude.messages.stream(model=VISION, max_tokens=3, messages=messages) as stream:
        assert stream.get_final_message().stop_reason in ("end_turn", "max_tokens")


def test_vision_model_output_can_be_constrained(sdk: openai.OpenAI) -> None:
    """Grammars are logits processors, which mlx-vlm's loop takes: even random weights write a
    well-formed call under tool_choice "required", and schema-valid JSON under response_format."""
    tool: dict[str, Any] = {
        "type": "function",
        "function": {
            "name": "describe",
            "parameters": {
                "type": "object",
                "properties": {"colour": {"type": "string", "maxLength": 8}},
                "required": ["colour"],
            },
        },
    }
    reply = chat(sdk, [image_message(data_url(RED))], tools=[tool], tool_choice="required", max_tokens=40)
    calls = reply.choices[0].message.tool_calls
    assert calls and calls[0].function.name == "describe"
    assert isinstance(json.loads(calls[0].function.arguments)["colour"], str)
    schema = tool["function"]["parameters"]
    response_format: Any = {"type": "json_schema", "json_schema": {"name": "answer", "schema": schema}}
    reply = chat(sdk, [image_message(data_url(BLUE))], response_format=response_format, max_tokens=40)
    assert isinstance(json.loads(reply.choices[0].message.content)["colour"], str)
