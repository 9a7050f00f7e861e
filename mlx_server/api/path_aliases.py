"""Root paths some clients call without /v1 (vLLM's /tokenize and /detokenize, llama-server's
and Jina's /rerank), served by their /v1 routes: the path is rewritten before anything else
runs, so the guard, the key check, the audit row and the time limits are those of /v1."""

from __future__ import annotations

from starlette.types import ASGIApp, Receive, Scope, Send

ROOT_ALIASES = {"/rerank": "/v1/rerank", "/tokenize": "/v1/tokenize", "/detokenize": "/v1/detokenize"}


class PathAliases:
    """Pure ASGI, outermost: `/rerank` is `/v1/rerank`, and so on (ROOT_ALIASES)."""

    def __init__(self, app: ASGIApp, aliases: dict[str, str] = ROOT_ALIASES) -> None:
        self.app, self.aliases = app, aliases

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        target = self.aliases.get(scope.get("path", "")) if scope["type"] == "http" else None
        if target is not None:
            scope = {**scope, "path": target, "raw_path": target.encode()}
        await self.app(scope, receive, send)
