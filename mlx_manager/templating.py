"""Jinja2 setup and the one render helper: full page, or its partial for htmx."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fastapi import Request
from fastapi.responses import HTMLResponse
from fastapi.templating import Jinja2Templates

from mlx_manager.csrf import csrf_token
from mlx_server import __version__

PROJECT_ROOT = Path(__file__).resolve().parents[1]
TEMPLATES_DIR = PROJECT_ROOT / "templates"
STATIC_DIR = PROJECT_ROOT / "static"

templates = Jinja2Templates(directory=TEMPLATES_DIR)
templates.env.globals["version"] = __version__
templates.env.globals["csrf_token"] = csrf_token


def filesize(num: float) -> str:
    """Binary units, as `mlx-manager models list` prints them."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(num) < 1024 or unit == "GiB":
            return f"{num:.0f} {unit}" if unit == "B" else f"{num:.1f} {unit}"
        num /= 1024
    raise AssertionError("unreachable")


templates.env.filters["filesize"] = filesize


def render(request: Request, page: str, partial: str | None = None, **context: Any) -> HTMLResponse:
    """Render `page`, or only `partial` when htmx asks (HX-Request header)."""
    is_htmx = request.headers.get("HX-Request") == "true"
    name = partial if partial and is_htmx else page
    return templates.TemplateResponse(request, name, context)
