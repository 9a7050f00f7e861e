"""A request a service turns down: the HTTP status that fits, and a message saying what to do."""

from __future__ import annotations


class Refusal(Exception):
    def __init__(self, status_code: int, message: str) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.message = message
