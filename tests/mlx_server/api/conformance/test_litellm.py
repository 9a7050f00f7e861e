"""litellm 1.110 through four providers: `openai/` (/v1), `anthropic/` (/v1/messages),
`ollama_chat/` (/api/chat) and `ollama/` (/api/generate; both send no Content-Type, which the
server reads as JSON); each streamed text equals the whole one."""

from __future__ import annotations

import litellm
import pytest

from tests.mlx_server.api.conformance.conftest import SMOL
from tests.support import ServerProcess

PROVIDERS = {"openai": "/v1", "anthropic": "", "ollama_chat": "", "ollama": ""}
HELLO = [{"role": "user", "content": "Say hello."}]


@pytest.mark.parametrize("provider", sorted(PROVIDERS))
def test_a_completion_streams_the_same_text(inference_server: ServerProcess, provider: str) -> None:
    arguments = {
        "model": f"{provider}/{SMOL}",
        "api_base": inference_server.url + PROVIDERS[provider],
        "api_key": "x",
        "messages": HELLO,
        "temperature": 0,
        "max_tokens": 8,
        "timeout": 300,
    }
    whole = litellm.completion(**arguments).choices[0].message.content  # type: ignore[union-attr]
    chunks = litellm.completion(**arguments, stream=True)
    streamed = "".join(chunk.choices[0].delta.content or "" for chunk in chunks)  # type: ignore[union-attr]
    assert whole and streamed == whole
