"""Issue #30's curl lines against the real server: a body sent with no Content-Type (as
litellm's Ollama providers send it) is read as JSON on /api and /v1; `curl -I /` is 200."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest

from tests.mlx_server.api.conformance.conftest import SMOL
from tests.support import ServerProcess

CURL = shutil.which("curl")
BODY = {"model": SMOL, "messages": [{"role": "user", "content": "Say hello."}], "stream": False}


def _post(url: str, body: dict[str, object]) -> tuple[int, str]:
    """POST `body` with curl's own Content-Type header removed (`-H 'Content-Type:'`)."""
    return _curl("-X", "POST", url, "-H", "Content-Type:", "--data-binary", json.dumps(body))


def _curl(*arguments: str) -> tuple[int, str]:
    assert CURL is not None
    done = subprocess.run(
        [CURL, "-s", "-o", "-", "-w", "\n%{http_code}", *arguments],
        capture_output=True,
        text=True,
        timeout=300,
    )
    body, _, status = done.stdout.rpartition("\n")
    return int(status), body


@pytest.mark.skipif(CURL is None, reason="curl is not installed")
def test_curl_without_content_type_and_curl_head(inference_server: ServerProcess) -> None:
    url = inference_server.url
    status, body = _post(f"{url}/api/chat", {**BODY, "options": {"num_predict": 4, "temperature": 0}})
    assert status == 200 and json.loads(body)["message"]["content"]
    status, body = _post(f"{url}/v1/chat/completions", {**BODY, "max_tokens": 4, "temperature": 0})
    assert status == 200 and json.loads(body)["choices"][0]["message"]["content"]
    status, _ = _curl("-I", f"{url}/")
    assert status == 200
