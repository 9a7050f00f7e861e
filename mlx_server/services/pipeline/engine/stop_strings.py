"""Stop strings on a text stream: never emitted, also when split across tokens."""

from __future__ import annotations


class StopStringFilter:
    """Holds back the tail of the text that could still become a stop string.

    `feed()` returns the text that is safe to emit; once a stop string appears, everything
    from its start on is dropped and `stopped` becomes true.
    """

    def __init__(self, stops: list[str]) -> None:
        self._stops = [s for s in stops if s]
        self._pending = ""
        self.stopped = False
        self.matched: str | None = None  # the stop string that ended the text

    def feed(self, text: str) -> str:
        if self.stopped:
            return ""
        if not self._stops:
            return text
        pending = self._pending + text
        found = [(i, s) for s in self._stops if (i := pending.find(s)) >= 0]
        if found:
            cut, self.matched = min(found)
            self.stopped = True
            self._pending = ""
            return pending[:cut]
        hold = self._longest_partial(pending)
        self._pending = pending[len(pending) - hold :] if hold else ""
        return pending[: len(pending) - hold]

    def flush(self) -> str:
        """The held-back text, once the stream ended without completing a stop string."""
        pending, self._pending = self._pending, ""
        return "" if self.stopped else pending

    def _longest_partial(self, text: str) -> int:
        """Length of the longest suffix of `text` that is a proper prefix of a stop string."""
        best = 0
        for stop in self._stops:
            for size in range(min(len(stop) - 1, len(text)), best, -1):
                if text.endswith(stop[:size]):
                    best = size
                    break
        return best
