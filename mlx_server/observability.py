"""Optional Logfire instrumentation: off unless a token is configured."""

from __future__ import annotations

from fastapi import FastAPI


def instrument(app: FastAPI, *, token: str | None, service_name: str) -> bool:
    """Send traces of `app` to Logfire when `token` is set; returns whether it did."""
    if not token:
        return False
    import logfire  # imported lazily: most installs never configure it

    logfire.configure(token=token, service_name=service_name, console=False)
    logfire.instrument_fastapi(app)
    return True
