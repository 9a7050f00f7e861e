"""Unsafe image URLs through /v1/chat/completions: each a 400 in OpenAI's error shape naming
why, nothing fetched past the size limit. 127.0.0.2 stands in for a public image host (the
one network the settings allow); everything else on loopback stays refused."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlmodel import Session

from mlx_server.database import get_engine
from mlx_server.records import ModelRecord, ModelSource
from tests.image_server import ImageServer, Route
from tests.mlx_server.services.images.test_decode import png_bomb

FIFTY_MB = 50 * 1024 * 1024


@pytest.fixture
def public_host(monkeypatch: pytest.MonkeyPatch) -> Iterator[ImageServer]:
    monkeypatch.setenv("MLX_SERVER_IMAGE_FETCH_ALLOWED_NETWORKS", '["127.0.0.2/32"]')
    with ImageServer("127.0.0.2") as server:
        yield server


@pytest.fixture
def api(public_host: ImageServer, smol_app: TestClient, tiny_vision_dir: Path) -> TestClient:
    with Session(get_engine()) as session:
        session.add(ModelRecord(id="tiny-vl", source=ModelSource.LOCAL, path=str(tiny_vision_dir)))
        session.commit()
    return smol_app


def ask(api: TestClient, url: str) -> Any:
    content = [{"type": "image_url", "image_url": {"url": url}}, {"type": "text", "text": "What is it?"}]
    body = {"model": "tiny-vl", "max_tokens": 2, "messages": [{"role": "user", "content": content}]}
    return api.post("/v1/chat/completions", json=body)


def test_unsafe_image_urls_are_400s_naming_why(api: TestClient, public_host: ImageServer) -> None:
    loopback = ImageServer("127.0.0.1")
    public_host.routes["/to-loopback.png"] = Route(status=302, headers={"Location": loopback.url("/cat.png")})
    public_host.routes["/huge.png"] = Route(stream_bytes=FIFTY_MB)
    public_host.routes["/page.png"] = Route(b"<!doctype html><title>Sign in</title>")
    bomb = "data:image/png;base64," + base64.b64encode(png_bomb(30_000, 30_000)).decode()
    cases = {
        "http://127.0.0.1/cat.png": "address 127.0.0.1 is a loopback address",
        "http://10.0.0.1/cat.png": "address 10.0.0.1 is a private network address",
        "http://169.254.169.254/latest/meta-data/": "169.254.169.254 is the cloud metadata address",
        "http://localhost/cat.png": "host localhost resolves to 127.0.0.1, a loopback address",
        public_host.url("/to-loopback.png"): "address 127.0.0.1 is a loopback address",
        public_host.url("/huge.png"): "larger than the limit of 20,971,520 bytes",
        bomb: "over the limit of 50,000,000 pixels",
        public_host.url("/page.png"): "not a PNG, JPEG, WebP or GIF image (it looks like an HTML page)",
        "file:///etc/passwd": "scheme file: is not allowed",
    }
    with loopback:
        for url, reason in cases.items():
            response = ask(api, url)
            error = response.json()["error"]
            assert response.status_code == 400, (url[:60], response.text[:300])
            assert error["type"] == "invalid_request_error" and error["code"] == "image_rejected"
            assert "Image 1 was refused" in error["message"] and reason in error["message"], error
    assert loopback.requests == []  # the redirect was refused before following it
    assert not public_host.finished["/huge.png"]
    assert public_host.sent["/huge.png"] < FIFTY_MB
