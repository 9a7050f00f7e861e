"""A request's output stream that holds the request's model lease and admission slot."""

from __future__ import annotations

from collections.abc import AsyncGenerator, Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class LeasedStream(Generic[T]):
    """The items of one request; gives back its model lease and admission slot exactly once:
    when iteration ends, fails or is abandoned, or, for a stream that was never iterated (a
    client gone before the response started), when it is collected."""

    def __init__(self, items: AsyncGenerator[T, None], release: Callable[[], None]) -> None:
        self._items = items
        self._release: Callable[[], None] | None = release

    def __aiter__(self) -> AsyncGenerator[T, None]:
        return self._iterate()

    async def _iterate(self) -> AsyncGenerator[T, None]:
        try:
            async for item in self._items:
                yield item
        finally:
            await self._items.aclose()
            self.release()

    def release(self) -> None:
        release, self._release = self._release, None
        if release is not None:
            release()

    def __del__(self) -> None:
        self.release()
