"""A whole (not streamed) response whose work is cancelled when its client leaves.

A streamed response notices a client that leaves when it next sends (sse-starlette also
listens for it). A handler that answers only at the end never sends until then, so a client
that gave up (a timeout, a closed tab) left its work running to the end: a long transcription
ran on for minutes and was recorded as a 500. `until_disconnected` listens for the ASGI
`http.disconnect` message meanwhile and cancels the work when it comes; the audit middleware,
which sees the message, records the request as 499.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Coroutine
from typing import Any

from starlette.requests import Request


async def _disconnect(request: Request) -> None:
    """Returns when the client has gone (the body has been read: nothing else can arrive)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


async def until_disconnected(request: Request, work: Coroutine[Any, Any, None]) -> bool:
    """Run `work` to its end (True), or cancel it when the client disconnects first (False).
    `work`'s exception, if it raises, is raised here."""
    task = asyncio.ensure_future(work)
    watcher = asyncio.ensure_future(_disconnect(request))
    try:
        await asyncio.wait({task, watcher}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        watcher.cancel()
        if not task.done():
            task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watcher
    if task.cancelled() or not task.done():
        with contextlib.suppress(asyncio.CancelledError):
            await task
        return False
    task.result()
    return True
